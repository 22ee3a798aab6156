"""The console's pages: sessions, one session (its conversation, live run and send box), and
approvals. Each acts as the signed-in viewer, under the same rule as the API route that does
the same (README, Security)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any, Final

import jinja2
from aiohttp import web

from adapters.http.context import Context
from adapters.http.prompts import answerable
from adapters.web.auth import ConsoleAuth, SignInNeeded, Viewer, forget, remember
from adapters.web.live import state_of
from gateway.events import Inbound
from gateway.ids import Prefix, prefix_of, validate_hash, validate_session_id
from gateway.logs import get_logger
from gateway.session_settings import REASONING_LEVELS, SettingsChange, SettingsRefused

log = get_logger(__name__)

CONVERSATION_LIMIT: Final = 200
PREFIXES: Final = tuple(prefix.value for prefix in Prefix)


def when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


class Pages:
    def __init__(self, ctx: Context, auth: ConsoleAuth, templates: jinja2.Environment) -> None:
        self.ctx = ctx
        self.auth = auth
        self.templates = templates

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
            return await self.auth.viewer(request)
        except SignInNeeded:
            raise web.HTTPSeeOther("/ui/login") from None

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
        identity = await self.auth.sign_in(token)
        if identity is None:
            return self.render("login.html", None, status=403, error="That token is not valid.")
        response = web.HTTPSeeOther("/ui/")
        remember(response, request, token)
        log.info("console sign-in", by=identity.key)
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        self.auth.check_form(request, viewer, await request.post())
        response = web.HTTPSeeOther("/ui/login")
        forget(response)
        raise response

    # -- sessions ------------------------------------------------------------------------------

    async def sessions(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        tab = request.query.get("prefix", "all")
        needle = request.query.get("q", "").strip().lower()
        router = self.ctx.router
        every = await self.ctx.store.list_sessions()
        counts = Counter(prefix_of(info.id).value for info in every)
        rows = [
            {
                "info": info,
                "running": router.running_task(info.id) is not None,
                "queued": router.queue_length(info.id),
            }
            for info in sorted(every, key=lambda info: info.updated_at, reverse=True)
            if (tab == "all" or info.id.startswith(f"{tab}-"))
            and (not needle or needle in info.id.lower() or needle in info.name.lower())
        ]
        waiting = {p.session_id for p in await router.open_prompts()}
        scheduled = await self.ctx.store.schedules.counts()
        return self.render(
            "sessions.html",
            viewer,
            tab=tab,
            tabs=[("all", len(every)), *((p, counts.get(p, 0)) for p in PREFIXES)],
            rows=rows,
            waiting=waiting,
            scheduled=scheduled,
            q=request.query.get("q", ""),
        )

    async def session(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        sid = validate_session_id(request.match_info["sid"])
        row = await self.ctx.store.get(sid)
        if row is None:
            raise web.HTTPNotFound(text=f"no such session: {sid}")
        messages = await self.ctx.store.recent_messages(sid, CONVERSATION_LIMIT)
        prompts = await self.ctx.router.open_prompts(sid)
        mine = answerable(self.ctx, viewer.origin(), prompts).pending
        running = self.ctx.router.running_task(sid)
        schedules = await self.ctx.store.schedules.of_session(sid)
        return self.render(
            "session.html",
            viewer,
            undelivered=await self.ctx.store.outbox.troubled(sid),
            schedules=schedules,
            row=row,
            messages=messages,
            prompts=mine,
            running=running,
            may_configure=self.ctx.runtime.authority.may_configure(viewer.origin(), sid),
            may_cancel=running is not None
            and self.ctx.runtime.authority.may_act_for(viewer.origin(), running.origin),
            known_tools=sorted(self.ctx.runtime.session_settings.known_tools or ()),
            reasoning_levels=REASONING_LEVELS,
            state=state_of(running, prompts),
        )

    async def send(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        sid = validate_session_id(request.match_info["sid"])
        form = await request.post()
        self.auth.check_form(request, viewer, form)
        text = str(form.get("content", "")).replace("\r\n", "\n")
        if text.strip():
            await self.ctx.router.submit(Inbound(viewer.origin(), sid, text))
        raise web.HTTPSeeOther(f"/ui/session/{sid}")

    async def cancel(self, request: web.Request) -> web.Response:
        """Only the task's requester, or an admin (the router checks)."""
        viewer = await self.viewer(request)
        sid = validate_session_id(request.match_info["sid"])
        self.auth.check_form(request, viewer, await request.post())
        task = validate_hash(request.match_info["task"])
        await self.ctx.router.cancel_for(viewer.origin(), sid, task)
        raise web.HTTPSeeOther(f"/ui/session/{sid}")

    async def configure(self, request: web.Request) -> web.Response:
        """The fields the form sent; in dc-* and tg-* only admins may change more than the
        name (the session settings check)."""
        viewer = await self.viewer(request)
        sid = validate_session_id(request.match_info["sid"])
        form = await request.post()
        self.auth.check_form(request, viewer, form)
        fields = {
            name: str(form[name]).strip()
            for name in ("name", "persona", "model", "reasoning")
            if name in form
        }
        tools = [str(tool) for tool in form.getall("allowed_tools", [])]
        change = SettingsChange(**fields, allowed_tools=tools if "tools_shown" in form else None)
        try:
            await self.ctx.runtime.session_settings.change(sid, viewer.origin(), change)
        except SettingsRefused as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        raise web.HTTPSeeOther(f"/ui/session/{sid}")

    # -- approvals -----------------------------------------------------------------------------

    async def approvals(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        prompts = answerable(self.ctx, viewer.origin(), await self.ctx.router.open_prompts())
        return self.render("approvals.html", viewer, prompts=prompts.pending)

    async def answer(self, request: web.Request) -> web.Response:
        viewer = await self.viewer(request)
        form = await request.post()
        self.auth.check_form(request, viewer, form)
        sid = validate_session_id(str(form.get("session_id", "")))
        task = validate_hash(str(form.get("task_hash", "")))
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
