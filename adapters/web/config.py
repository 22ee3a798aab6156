"""The console's live configuration pages, for gateway admins only (others get 403, as over the
API): the quota and budget defaults and every identity's or chat's own limits, with a form that
changes one (from the next message on, on every instance); the per-user API tokens, issued
(shown once) and revoked; and the log of quota, binding and token changes — who, when, before
and after — a page at a time, each with a button that rolls it back, beside a form that links
one person's identities or parts one. The checks and the rollback are those of the API and
the CLI (gateway/quota_changes.py, gateway/config_log.py)."""

from __future__ import annotations

import re
from typing import Final

from aiohttp import web

from adapters.http.context import Context
from adapters.http.models import IDENTITY_PATTERN
from adapters.web.auth import Form, Viewer
from adapters.web.pages import Pages
from adapters.web.refusals import RefusedForms
from gateway.config_log import revert
from gateway.credentials import TokenRefused, new_token
from gateway.quota_changes import QuotaInvalid, checked, in_dollars
from gateway.quotas import CHAT_KEYS, PERSON_KEYS, defaults
from gateway.store.config_changes import ConfigChanges, NotRevertible, UnknownChange
from gateway.store.quotas import Quotas
from gateway.store.tokens import TokenStore

FORBIDDEN: Final = "only gateway admins change the configuration"
PAGE_SIZE: Final = 50
LIMIT_KEYS: Final = tuple(dict.fromkeys((*PERSON_KEYS, *CHAT_KEYS)))
QUOTAS: Final = "/ui/quotas"
CHANGES: Final = "/ui/changes"
TOKENS: Final = "/ui/tokens"


def _value(text: str) -> str | int | None:
    """A limit as typed: `default` (or nothing) for none of its own, else a number as text
    (money may carry `$` and cents; `checked` refuses the rest, naming the limit)."""
    text = text.strip()
    if text in ("", "default"):
        return None
    if text.isascii() and text.isdigit() and len(text) <= 15:
        return int(text)
    return text


class ConfigPages:
    def __init__(self, ctx: Context, pages: Pages) -> None:
        self.ctx = ctx
        self.pages = pages
        self.refusals = RefusedForms(ctx.runtime.kv)

    async def _admin(self, request: web.Request) -> Viewer:
        viewer = await self.pages.viewer(request)
        if not (await self.ctx.access.caller(viewer.origin())).gateway_admin:
            raise web.HTTPForbidden(text=FORBIDDEN)
        return viewer

    async def _posted(self, request: web.Request) -> tuple[Viewer, Form]:
        viewer = await self.pages.viewer(request)
        form = await request.post()
        self.pages.auth.check_form(request, viewer, form)
        if not (await self.ctx.access.caller(viewer.origin())).gateway_admin:
            raise web.HTTPForbidden(text=FORBIDDEN)
        return viewer, form

    # -- quotas ----------------------------------------------------------------------------

    async def quotas(self, request: web.Request) -> web.Response:
        viewer = await self._admin(request)
        person, chat = defaults(self.ctx.settings)
        overrides = await Quotas(self.ctx.store.db).all()
        refusal = await self.refusals.shown(viewer, request)
        return self.pages.render(
            "quotas.html",
            viewer,
            person=in_dollars(person),
            chat=in_dollars(chat),
            overrides={subject: in_dollars(limits) for subject, limits in overrides.items()},
            keys=LIMIT_KEYS,
            refusal=refusal,
            values=refusal.values if refusal else {},
            saved=request.query.get("saved", "")[:200],
        )

    async def set_quota(self, request: web.Request) -> web.Response:
        viewer, form = await self._posted(request)
        entered = {name: str(form.get(name, ""))[:200] for name in ("subject", "limit", "value")}
        subject = entered["subject"].strip()
        try:
            changes = checked(subject, {entered["limit"]: _value(entered["value"])})
        except QuotaInvalid as exc:
            await self.refusals.refuse(viewer, QUOTAS, "quota", str(exc), exc.field, entered)
        by = viewer.origin().sender_key
        await Quotas(self.ctx.store.db).set(subject, changes, by=by)
        raise web.HTTPSeeOther(f"{QUOTAS}?saved={subject}")

    # -- tokens ----------------------------------------------------------------------------

    async def tokens(self, request: web.Request) -> web.Response:
        viewer = await self._admin(request)
        issued = await TokenStore(self.ctx.store.db).load()
        refusal = await self.refusals.shown(viewer, request)
        return self.pages.render(
            "tokens.html",
            viewer,
            tokens=issued,
            refusal=refusal,
            values=refusal.values if refusal else {},
            revoked=request.query.get("revoked", "")[:64],
            issued=None,
            token="",
        )

    async def issue_token(self, request: web.Request) -> web.Response:
        """A new token, shown on the answer to this form only: never kept, never redirected
        to (an address would put it in the browser's history)."""
        viewer, form = await self._posted(request)
        entered = {name: str(form.get(name, ""))[:200] for name in ("name", "display")}
        runtime = self.ctx.runtime
        try:
            token, issued = new_token(entered["name"].strip(), entered["display"])
            by = viewer.origin().sender_key
            await TokenStore(runtime.store.db).issue(issued, by=by, at=runtime.clock.now_ms())
        except TokenRefused as exc:
            field = "display" if "display" in str(exc) else "name"
            await self.refusals.refuse(viewer, TOKENS, "issue", str(exc), field, entered)
        response = self.pages.render(
            "tokens.html",
            viewer,
            tokens=await TokenStore(runtime.store.db).load(),
            refusal=None,
            values={},
            revoked="",
            issued=issued,
            token=token,
        )
        response.headers["Cache-Control"] = "no-store"
        return response

    async def revoke_token(self, request: web.Request) -> web.Response:
        viewer, form = await self._posted(request)
        name = str(form.get("name", ""))[:64]
        runtime = self.ctx.runtime
        tokens = TokenStore(runtime.store.db)
        by = viewer.origin().sender_key
        if not await tokens.revoke(name, by=by, at=runtime.clock.now_ms()):
            error = f"name: no token for {name!r}"
            await self.refusals.refuse(viewer, TOKENS, "revoke", error, "name", {})
        raise web.HTTPSeeOther(f"{TOKENS}?revoked={name}")

    # -- the change log --------------------------------------------------------------------

    async def changes(self, request: web.Request) -> web.Response:
        viewer = await self._admin(request)
        before = request.query.get("before", "")
        before_id = (
            int(before) if before.isascii() and before.isdigit() and len(before) < 19 else None
        )
        found = await ConfigChanges(self.ctx.store.db).page(
            limit=PAGE_SIZE + 1, before_id=before_id
        )
        page = found[:PAGE_SIZE]
        refusal = await self.refusals.shown(viewer, request)
        return self.pages.render(
            "changes.html",
            viewer,
            changes=[
                {"c": c, "before": _shown(c.kind, c.before), "after": _shown(c.kind, c.after)}
                for c in page
            ],
            older=page[-1].id if len(found) > PAGE_SIZE else None,
            refusal=refusal,
            values=refusal.values if refusal else {},
            reverted=request.query.get("reverted", "")[:20],
            linked=request.query.get("linked", "")[:200],
            unlinked=request.query.get("unlinked", "")[:200],
        )

    async def revert(self, request: web.Request) -> web.Response:
        viewer, _form = await self._posted(request)
        raw = request.match_info["change"]
        runtime = self.ctx.runtime
        try:
            if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
                raise UnknownChange(f"no configuration change {raw[:20]!r}")
            by = viewer.origin().sender_key
            done = await revert(runtime.store.db, int(raw), by=by, at=runtime.clock.now_ms())
        except (UnknownChange, NotRevertible) as exc:
            await self.refusals.refuse(viewer, CHANGES, "revert", str(exc), "change", {})
        if done.kind == "binding" and runtime.profiles is not None:
            runtime.profiles.changed()
        if done.kind == "connection":
            runtime.connections.changed()
        raise web.HTTPSeeOther(f"{CHANGES}?reverted={raw}")

    # -- linked identities -----------------------------------------------------------------

    async def link(self, request: web.Request) -> web.Response:
        """Join an identity (and whatever it is linked with) to another's person."""
        viewer, form = await self._posted(request)
        entered = {name: str(form.get(name, "")).strip()[:200] for name in ("identity", "to")}
        for field in ("identity", "to"):
            if not _IDENTITY.fullmatch(entered[field]):
                error = f"{field}: an identity is platform:sender id, e.g. http:ann or telegram:42"
                await self.refusals.refuse(viewer, CHANGES, "link", error, field, entered)
        if entered["identity"] == entered["to"]:
            error = "to: an identity is linked with itself already"
            await self.refusals.refuse(viewer, CHANGES, "link", error, "to", entered)
        by = viewer.origin().sender_key
        await self.ctx.store.ownership.link(entered["identity"], entered["to"], by=by)
        raise web.HTTPSeeOther(f"{CHANGES}?linked={entered['identity']}")

    async def unlink(self, request: web.Request) -> web.Response:
        viewer, form = await self._posted(request)
        identity = str(form.get("identity", "")).strip()[:200]
        by = viewer.origin().sender_key
        if not _IDENTITY.fullmatch(identity) or not await self.ctx.store.ownership.unlink(
            identity, by=by
        ):
            error = f"identity: {identity[:60]!r} is linked with nobody"
            await self.refusals.refuse(viewer, CHANGES, "link", error, "identity", {})
        raise web.HTTPSeeOther(f"{CHANGES}?unlinked={identity}")


_IDENTITY: Final = re.compile(IDENTITY_PATTERN)


def _shown(kind: str, value: object) -> str:
    """A logged value as one line: limits as `key=value`, a binding as its profile, a token as
    its display name and the start of its hash."""
    if value is None:
        return "—"
    if kind == "token" and isinstance(value, dict):
        return f"{value.get('display', '')} (sha256 {value.get('sha256_prefix', '')}…)"
    if kind == "quota" and isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in in_dollars(value).items())
    if isinstance(value, dict):
        switchable = ", ".join(value.get("switchable", []))
        return str(value.get("profile", "")) + (
            f" (switchable: {switchable})" if switchable else ""
        )
    return str(value)


def add_config_routes(app: web.Application, pages: ConfigPages) -> None:
    app.router.add_get("/quotas", pages.quotas)
    app.router.add_post("/quotas", pages.set_quota)
    app.router.add_get("/tokens", pages.tokens)
    app.router.add_post("/tokens", pages.issue_token)
    app.router.add_post("/tokens/revoke", pages.revoke_token)
    app.router.add_get("/changes", pages.changes)
    app.router.add_post("/changes/{change}/revert", pages.revert)
    app.router.add_post("/identities/link", pages.link)
    app.router.add_post("/identities/unlink", pages.unlink)
