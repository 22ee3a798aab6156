"""The console's pages: sessions, one session (its conversation, live run and send box), and
approvals. Each acts as the signed-in viewer, under the same rule as the API route that does
the same (README, Security)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final

import jinja2
from aiohttp import web

from adapters.http.context import Context
from adapters.http.paging import encode_cursor
from adapters.http.paging import read_cursor as read_key
from adapters.http.prompts import answerable, may_answer, pending_page
from adapters.web.auth import ConsoleAuth, SignInNeeded, Viewer, forget, remember
from adapters.web.live import state_of
from gateway.events import Inbound, Origin
from gateway.ids import Prefix, validate_hash, validate_session_id
from gateway.logs import get_logger
from gateway.ownership import Need
from gateway.session_settings import REASONING_LEVELS, SettingsChange, SettingsRefused
from gateway.store.errors import DatabaseUnavailable
from gateway.store.listing import SessionCursor, SessionInfo
from gateway.store.message_reads import StoredMessage

log = get_logger(__name__)

# Messages a page of a conversation shows; it opens at the newest, and pages back.
CONVERSATION_PAGE: Final = 100
# Prompts a page of approvals shows.
APPROVALS_PAGE: Final = 50
PREFIXES: Final = tuple(prefix.value for prefix in Prefix)
# Sessions a page of the list shows; a filter by id or name reads at most SCAN_PAGES pages of
# SCAN_SIZE to fill one, so that a filter matching little is still answered at once.
PAGE_SIZE: Final = 50
SCAN_SIZE: Final = 200
SCAN_PAGES: Final = 10


def when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def cursor_text(info: SessionInfo) -> str:
    return f"{info.updated_at}.{info.id}"


def read_cursor(text: str) -> SessionCursor | None:
    """The `after` of a list page's address; HTTP 400 for one the console did not write."""
    if not text:
        return None
    updated, _, sid = text.partition(".")
    if not updated.isdigit() or len(updated) > 19:
        raise web.HTTPBadRequest(text="this page's address is damaged: go back to the list")
    return SessionCursor(int(updated), validate_session_id(sid))


async def no_first_run() -> bool:
    return False


class Pages:
    def __init__(self, ctx: Context, auth: ConsoleAuth, templates: jinja2.Environment) -> None:
        self.ctx = ctx
        self.auth = auth
        self.templates = templates
        # Whether nothing is configured yet, so the sessions list points gateway admins to
        # Getting started (adapters/web/start.py says; that module imports this one).
        self.first_run: Callable[[], Awaitable[bool]] = no_first_run

    def render(
        self, name: str, viewer: Viewer | None, status: int = 200, **values: Any
    ) -> web.Response:
        html = self.templates.get_template(name).render(viewer=viewer, when=when, **values)
        response = web.Response(text=html, status=status, content_type="text/html")
        # Pages show people's messages: never kept by a shared cache, never framed elsewhere.
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            "frame-ancestors 'none'; form-action 'self'"
        )
        return response

    async def viewer(self, request: web.Request) -> Viewer:
        try:
            viewer = await self.auth.viewer(request)
        except SignInNeeded:
            raise web.HTTPSeeOther("/ui/login") from None
        # Asked afresh on every request: an admin removed from AGENVOY_ADMINS, or unlinked,
        # loses the admins' link at once. Only a link to show: while the archive cannot be
        # answered, Health still is (the profiles' pages ask again, strictly).
        try:
            caller = await self.ctx.access.caller(viewer.origin())
        except DatabaseUnavailable:
            return viewer
        return replace(viewer, gateway_admin=caller.gateway_admin)

    # -- signing in ----------------------------------------------------------------------------

    async def login_form(self, request: web.Request) -> web.Response:
        return self.render("login.html", None, error="")

    async def login(self, request: web.Request) -> web.Response:
        # Signing someone in from another site (to their own token) is refused as well.
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":
            raise web.HTTPForbidden(text="this form was sent from another site")
        form = await request.post()
        token = str(form.get("token", "")).strip()
        signin_id = await self.auth.sign_in(token)
        if signin_id is None:
            return self.render("login.html", None, status=403, error="That token is not valid.")
        response = web.HTTPSeeOther("/ui/")
        remember(response, request, signin_id)
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        self.auth.check_form(request, viewer, await request.post())
        await self.auth.sign_out(viewer)
        response = web.HTTPSeeOther("/ui/login")
        forget(response)
        raise response

    # -- sessions ------------------------------------------------------------------------------

    async def sessions(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        tab = request.query.get("prefix", "all")
        if tab not in ("all", *PREFIXES):
            tab = "all"
        q = request.query.get("q", "")
        shown, after = await self._page(
            viewer, tab, q.strip().lower(), read_cursor(request.query.get("after", ""))
        )
        router = self.ctx.router
        rows = [
            {
                "info": info,
                "running": router.running_task(info.id) is not None,
                "queued": router.queue_length(info.id),
            }
            for info in shown
        ]
        waiting = {p.session_id for p in await router.open_prompts()}
        scheduled = await self.ctx.store.schedules.counts()
        return self.render(
            "sessions.html",
            viewer,
            unconfigured=viewer.gateway_admin and await self.first_run(),
            tab=tab,
            tabs=["all", *PREFIXES],
            rows=rows,
            waiting=waiting,
            scheduled=scheduled,
            q=q,
            after=after,
            paged="after" in request.query,
        )

    async def _page(
        self, viewer: Viewer, tab: str, needle: str, after: SessionCursor | None
    ) -> tuple[list[SessionInfo], str]:
        """The sessions one list page shows, and the `after` of the next page ("" at the end)."""
        visible = await self.ctx.access.visibility(viewer.origin())
        prefix = None if tab == "all" else tab
        store = self.ctx.store
        if not needle:
            found = await store.list_sessions(
                visible, prefix=prefix, after=after, limit=PAGE_SIZE + 1
            )
            more = len(found) > PAGE_SIZE
            shown = found[:PAGE_SIZE]
            return shown, cursor_text(shown[-1]) if more else ""
        shown = []
        for _ in range(SCAN_PAGES):
            batch = await store.list_sessions(visible, prefix=prefix, after=after, limit=SCAN_SIZE)
            for info in batch:
                if needle in info.id.lower() or needle in info.name.lower():
                    shown.append(info)
                    if len(shown) > PAGE_SIZE:
                        return shown[:PAGE_SIZE], cursor_text(shown[PAGE_SIZE - 1])
            if len(batch) < SCAN_SIZE:
                return shown, ""
            after = SessionCursor(batch[-1].updated_at, batch[-1].id)
        # Not filled from what was read: the next page goes on from there.
        return shown, f"{after.updated_at}.{after.session_id}" if after is not None else ""

    async def session(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        sid = validate_session_id(request.match_info["sid"])
        origin = viewer.origin()
        await self.ctx.access.require(origin, sid, Need.read)
        row = await self.ctx.store.get(sid)
        if row is None:
            raise web.HTTPNotFound(text=f"no such session: {sid}")
        access = self.ctx.access
        messages, older, newer = await self._conversation(sid, request)
        prompts = await self.ctx.router.open_prompts(sid)
        mine = answerable(self.ctx, origin, prompts).pending
        running = self.ctx.router.running_task(sid)
        schedules = await self.ctx.store.schedules.of_session(sid)
        return self.render(
            "session.html",
            viewer,
            undelivered=await self.ctx.store.outbox.troubled(sid),
            schedules=schedules,
            row=row,
            messages=messages,
            older=older,
            newer=newer,
            # Read upwards from its end, as a chat is; a page of newer ones from its start.
            open_at_end="after" not in request.query,
            prompts=mine,
            running=running,
            may_write=await access.may(origin, sid, Need.write),
            may_settings=await access.may(origin, sid, Need.configure),
            may_configure=self.ctx.runtime.authority.may_configure(origin, sid),
            may_cancel=running is not None
            and self.ctx.runtime.authority.may_act_for(origin, running.origin)
            and await access.may(origin, sid, Need.write),
            known_tools=sorted(self.ctx.runtime.session_settings.known_tools or ()),
            reasoning_levels=REASONING_LEVELS,
            state=state_of(running, prompts),
        )

    async def _conversation(
        self, sid: str, request: web.Request
    ) -> tuple[list[StoredMessage], str | None, str | None]:
        """The page of the conversation the address asks for: the newest messages, those
        `before` a cursor or those `after` one, oldest first; and the cursors of the pages
        older and newer than it (None: there is none)."""
        store = self.ctx.store
        before = read_key(request.query.get("before") or None, int)
        after = read_key(request.query.get("after") or None, int)
        if after is not None:
            found = await store.message_page(sid, CONVERSATION_PAGE + 1, after_id=int(after[0]))
            shown = found[:CONVERSATION_PAGE]
            has_older, has_newer = True, len(found) > CONVERSATION_PAGE
        else:
            before_id = None if before is None else int(before[0])
            found = await store.message_page(sid, CONVERSATION_PAGE + 1, before_id=before_id)
            shown = found[1:] if len(found) > CONVERSATION_PAGE else found
            has_older, has_newer = len(found) > CONVERSATION_PAGE, before is not None
        if not shown:  # past either end: the way back is the newest page
            return shown, None, "" if (before or after) else None
        older = encode_cursor(shown[0].id) if has_older else None
        newer = encode_cursor(shown[-1].id) if has_newer else None
        return shown, older, newer

    async def send(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        sid = validate_session_id(request.match_info["sid"])
        form = await request.post()
        self.auth.check_form(request, viewer, form)
        origin = viewer.origin()
        text = str(form.get("content", "")).replace("\r\n", "\n")
        access = self.ctx.access
        await access.require(
            origin, sid, access.message_need(sid, self.ctx.runtime.commands.need_of(text))
        )
        if text.strip():
            await self.ctx.router.submit(Inbound(origin, sid, text))
        raise web.HTTPSeeOther(f"/ui/session/{sid}")

    async def cancel(self, request: web.Request) -> web.Response:
        """Only the task's requester, or an admin (the router checks)."""
        viewer = await self.viewer(request)
        sid = validate_session_id(request.match_info["sid"])
        self.auth.check_form(request, viewer, await request.post())
        task = validate_hash(request.match_info["task"])
        origin = viewer.origin()
        await self.ctx.access.require(origin, sid, Need.write)
        await self.ctx.router.cancel_for(origin, sid, task)
        raise web.HTTPSeeOther(f"/ui/session/{sid}")

    async def configure(self, request: web.Request) -> web.Response:
        """The fields the form sent; in dc-* and tg-* only admins may change more than the
        name (the session settings check)."""
        viewer = await self.viewer(request)
        sid = validate_session_id(request.match_info["sid"])
        form = await request.post()
        self.auth.check_form(request, viewer, form)
        origin = viewer.origin()
        await self.ctx.access.require(origin, sid, Need.configure)
        fields = {
            name: str(form[name]).strip()
            for name in ("name", "persona", "model", "reasoning")
            if name in form
        }
        tools = [str(tool) for tool in form.getall("allowed_tools", [])]
        change = SettingsChange(**fields, allowed_tools=tools if "tools_shown" in form else None)
        try:
            await self.ctx.runtime.session_settings.change(sid, origin, change)
        except SettingsRefused as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        raise web.HTTPSeeOther(f"/ui/session/{sid}")

    # -- approvals -----------------------------------------------------------------------------

    async def approvals(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        origin = viewer.origin()
        prompts = may_answer(self.ctx, origin, await self.ctx.router.open_prompts())
        readable = await self.readable(origin, {prompt.session_id for prompt in prompts})
        mine = [prompt for prompt in prompts if prompt.session_id in readable]
        page = pending_page(mine, APPROVALS_PAGE, request.query.get("after") or None)
        return self.render(
            "approvals.html",
            viewer,
            prompts=page.pending,
            after=page.next_cursor,
            paged="after" in request.query,
        )

    async def readable(self, origin: Origin, session_ids: set[str]) -> set[str]:
        """Those of `session_ids` `origin` may read."""
        access = self.ctx.access
        return {sid for sid in session_ids if await access.may(origin, sid, Need.read)}

    async def answer(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        form = await request.post()
        self.auth.check_form(request, viewer, form)
        sid = validate_session_id(str(form.get("session_id", "")))
        task = validate_hash(str(form.get("task_hash", "")))
        await self.ctx.access.require(viewer.origin(), sid, Need.write)
        decision = form.get("decision")
        text = form.get("answer")
        await self.ctx.router.answer(
            sid,
            task,
            viewer.origin(),
            approve=None if decision is None else decision == "approve",
            text=None if decision is not None else str(text or ""),
        )
        back = str(form.get("back", "/ui/approvals"))
        raise web.HTTPSeeOther(back if back.startswith("/ui/") else "/ui/approvals")
