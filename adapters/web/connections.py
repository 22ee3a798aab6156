"""The console's page for platform connections, for gateway admins only (others get 403, as over
the API): which bot token Telegram and Discord connect with, named by reference (`env:NAME`,
`file:NAME`), or that one is off, and the state of each here; a form that changes one and a
button that gives one back to the environment. A change goes through gateway/connections.py,
as /v1/connections and `agenvoy connection` do, so this instance applies it at once and the
others at their next check.

The page shows where a token comes from, never the token: a view's resolved secret
(`Wanted.token`) is not handed to the template. A refused form is shown again with its error
(adapters/web/refusals.py), keeping what was entered only when it is a reference — anything else
may be a token pasted by mistake, and is neither kept nor shown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from aiohttp import web

from adapters.http.context import Context
from adapters.web.auth import Form, Viewer
from adapters.web.pages import Pages
from adapters.web.refusals import RefusedForms
from gateway.connections import PLATFORMS, ConnectionInvalid, Connections, live
from gateway.profiles.spec import KEY_REFERENCE, looks_like_key

FORBIDDEN: Final = "only gateway admins manage platform connections"
PAGE: Final = "/ui/connections"
# Longer than any reference the archive keeps (140): a longer entry is refused, not cut to fit.
_MAX_ENTERED_CHARS: Final = 300
PLACEHOLDERS: Final = {"telegram": "env:TELEGRAM_BOT_TOKEN", "discord": "env:DISCORD_BOT_TOKEN"}


@dataclass(frozen=True, slots=True)
class Row:
    """One platform as the page shows it: nothing in it is a token."""

    platform: str
    source: str  # "environment", "env:NAME" / "file:NAME", "off", "not configured"
    problem: str  # why a configured reference gives no token
    state: str
    reference: str  # the configured reference ("" when none is)
    enabled: bool
    changed_by: str
    changed_at: int  # 0 when none is configured
    live: bool  # False: Telegram in webhook mode, which keeps the environment's token


def _kept(entered: str) -> str:
    """What of an entered reference a refused form may show again: a reference as typed, and
    nothing else (which may be a token)."""
    text = entered.strip()
    return text if KEY_REFERENCE.fullmatch(text) and not looks_like_key(text) else ""


def _shown(request: web.Request, name: str) -> str:
    """A platform a redirect put in the address (`?saved=telegram`), if it is one."""
    value = request.query.get(name, "")
    return value if value in PLATFORMS else ""


class ConnectionPages:
    def __init__(self, ctx: Context, pages: Pages) -> None:
        self.ctx = ctx
        self.pages = pages
        self.refusals = RefusedForms(ctx.runtime.kv)

    # -- who may ---------------------------------------------------------------------------

    async def _connections(self, viewer: Viewer) -> Connections:
        # Asked here rather than trusting the nav's link, which gives way to an archive that
        # cannot be reached: this answers 503 then.
        if not (await self.ctx.access.caller(viewer.origin())).gateway_admin:
            raise web.HTTPForbidden(text=FORBIDDEN)
        return self.ctx.runtime.connections

    async def _posted(self, request: web.Request) -> tuple[Viewer, Connections, Form, str]:
        viewer = await self.pages.viewer(request)
        form = await request.post()
        self.pages.auth.check_form(request, viewer, form)
        connections = await self._connections(viewer)
        platform = request.match_info["platform"]
        if platform not in PLATFORMS:
            known = ", ".join(PLATFORMS)
            raise web.HTTPNotFound(text=f"no platform {platform[:40]!r}: one of {known}")
        return viewer, connections, form, platform

    # -- the page --------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        viewer = await self.pages.viewer(request)
        connections = await self._connections(viewer)
        settings = self.ctx.settings
        rows = []
        for view in await connections.views():
            row = view.configured
            rows.append(
                Row(
                    platform=view.platform,
                    source=view.wanted.source,
                    problem=view.wanted.problem,
                    state=connections.state(view.platform),
                    reference=row.token if row else "",
                    enabled=row.enabled if row else True,
                    changed_by=row.changed_by if row else "",
                    changed_at=row.changed_at if row else 0,
                    live=live(settings, view.platform),
                )
            )
        refusal = await self.refusals.shown(viewer, request)
        return self.pages.render(
            "connections.html",
            viewer,
            rows=rows,
            refusal=refusal,
            values=refusal.values if refusal else {},
            placeholders=PLACEHOLDERS,
            secrets_path=str(settings.secrets_path),
            saved=_shown(request, "saved"),
            reset=_shown(request, "reset"),
        )

    # -- changes ---------------------------------------------------------------------------

    async def put(self, request: web.Request) -> web.Response:
        viewer, connections, form, platform = await self._posted(request)
        entered = str(form.get("token", ""))[:_MAX_ENTERED_CHARS]
        enabled = bool(form.get("enabled"))
        try:
            await connections.put(platform, entered, enabled, by=viewer.origin().sender_key)
        except ConnectionInvalid as exc:
            # The core's messages never repeat what was entered; the field is what keeps it.
            values = {"token": _kept(entered), "enabled": "on" if enabled else ""}
            field = str(exc).partition(":")[0]
            await self.refusals.refuse(viewer, PAGE, platform, str(exc), field, values)
        raise web.HTTPSeeOther(f"{PAGE}?saved={platform}")

    async def reset(self, request: web.Request) -> web.Response:
        viewer, connections, _, platform = await self._posted(request)
        try:
            gone = await connections.reset(platform, by=viewer.origin().sender_key)
        except ConnectionInvalid as exc:
            await self.refusals.refuse(viewer, PAGE, platform, str(exc), "platform", {})
        if not gone:
            error = f"{platform} has no connection configured here: reset already?"
            await self.refusals.refuse(viewer, PAGE, platform, error, "platform", {})
        raise web.HTTPSeeOther(f"{PAGE}?reset={platform}")


def add_connection_routes(app: web.Application, pages: ConnectionPages) -> None:
    app.router.add_get("/connections", pages.index)
    app.router.add_post("/connections/{platform}", pages.put)
    app.router.add_post("/connections/{platform}/reset", pages.reset)
