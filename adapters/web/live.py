"""A session's live events for the console's pages, as server-sent events: what the page's
script shows of a running task (text as it streams, tool calls and results, prompts)."""

from __future__ import annotations

import json

from aiohttp import web

from adapters.http.context import Context
from adapters.http.sse import StreamClosed
from adapters.web.auth import ConsoleAuth, SignInNeeded
from gateway.engine import Prompt, TaskView
from gateway.events import event_to_json
from gateway.ids import validate_session_id


async def session_state(ctx: Context, session_id: str) -> str:
    """What a session page shows that events change: its running task and open prompts."""
    prompts = await ctx.router.open_prompts(session_id)
    return state_of(ctx.router.running_task(session_id), prompts)


def state_of(running: TaskView | None, prompts: list[Prompt]) -> str:
    """The state a page was rendered from: it must be made of the very task and prompts the
    page shows, or a prompt posted between reading them and reading the state again would
    match the stream's first state and never be shown."""
    task = running.task_hash if running is not None else "-"
    return f"{task}/{','.join(sorted(p.task_hash for p in prompts))}"


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
                # What changed between the page's rendering and this subscription is in no
                # event: the page compares this with what it was rendered from.
                await stream.frame("state", json.dumps(await session_state(ctx, sid)))
                while True:
                    event = await stream.receive(sub.get)
                    await stream.frame(event.kind, event_to_json(event))
            except StreamClosed:
                pass
        return response
