"""A session's live events for the console's pages, as server-sent events: what the page's
script shows of a running task (text as it streams, tool calls and results, prompts)."""

from __future__ import annotations

from aiohttp import web

from adapters.http.context import Context
from adapters.http.sse import StreamClosed
from adapters.web.auth import ConsoleAuth, SignInNeeded
from gateway.events import event_to_json
from gateway.ids import validate_session_id


class LiveEvents:
    def __init__(self, ctx: Context, auth: ConsoleAuth) -> None:
        self.ctx = ctx
        self.auth = auth

    async def stream(self, request: web.Request) -> web.StreamResponse:
        try:
            await self.auth.viewer(request)
        except SignInNeeded:
            raise web.HTTPUnauthorized(text="sign in first") from None
        sid = validate_session_id(request.match_info["sid"])
        ctx = self.ctx
        await ctx.require_session(sid)
        response, stream = ctx.event_stream(request, ctx.farewell(sid))
        with ctx.router.subscribe(sid) as sub:
            try:
                await stream.start()
                await stream.comment("live")
                while True:
                    event = await stream.receive(sub.get)
                    await stream.frame(event.kind, event_to_json(event))
            except StreamClosed:
                pass
        return response
