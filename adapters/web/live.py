"""A session's live events for the console's pages, as server-sent events: what the page's
script shows of a running task (text as it streams, tool calls and results, prompts).

A stream lasts only as long as the sign-in that opened it: once that ends (signed out
elsewhere, expired, its token revoked) a last `signed_out` frame is sent and the stream ends,
within `SIGNIN_CHECK_SECONDS`. It lasts only as long as its viewer may read the session, too:
once they may not (the share withdrawn, the identity that made them a chat's member unlinked)
it ends without a word, and the page's script, opening it again, is answered 404."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Final

from aiohttp import web

from adapters.http.context import Context
from adapters.http.sse import EventStream, StreamClosed
from adapters.web.auth import ConsoleAuth, SignInNeeded, Viewer
from gateway.engine import Prompt, TaskView
from gateway.events import Event, event_to_json
from gateway.ids import validate_session_id
from gateway.logs import get_logger
from gateway.ownership import Need

log = get_logger(__name__)

# How often an open stream asks whether its sign-in still stands and its viewer may still
# read the session: a revoked token's streams end within this (the issued tokens are read afresh
# each time), as do those of a viewer whose share was withdrawn.
SIGNIN_CHECK_SECONDS: Final = 0.5


class Ended(Enum):
    """Why a stream's watch ended it."""

    signed_out = "signed_out"
    no_access = "no_access"


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
            viewer = await self.auth.viewer(request)
        except SignInNeeded:
            raise web.HTTPUnauthorized(text="sign in first") from None
        sid = validate_session_id(request.match_info["sid"])
        ctx = self.ctx
        await ctx.access.require(viewer.origin(), sid, Need.read)
        response, stream = ctx.event_stream(request, ctx.farewell(sid))
        with ctx.router.subscribe(sid) as sub:
            try:
                await stream.start()
                # What changed between the page's rendering and this subscription is in no
                # event: the page compares this with what it was rendered from.
                await stream.frame("state", json.dumps(await session_state(ctx, sid)))
                relay = asyncio.ensure_future(self._relay(stream, sub.get))
                watch = asyncio.ensure_future(self._until_ended(viewer, sid))
                try:
                    await asyncio.wait({relay, watch}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for job in (relay, watch):
                        job.cancel()
                    await asyncio.gather(relay, watch, return_exceptions=True)
                if relay.done() and not relay.cancelled():
                    relay.result()  # it ends only by raising: the client left, or a failure
                if watch.cancelled():
                    pass
                elif watch.exception() is None:
                    if watch.result() is Ended.signed_out:
                        await stream.frame("signed_out", "{}")
                else:
                    # The page's script opens the stream again, and is then told plainly.
                    log.warning(
                        "console stream could not check its sign-in", error=str(watch.exception())
                    )
            except StreamClosed:
                pass
        return response

    @staticmethod
    async def _relay(stream: EventStream, get: Callable[[], Awaitable[Event]]) -> None:
        while True:
            event = await stream.receive(get)
            await stream.frame(event.kind, event_to_json(event))

    async def _until_ended(self, viewer: Viewer, session_id: str) -> Ended:
        clock = self.ctx.runtime.clock
        origin = viewer.origin()
        while True:
            if not await self.auth.still_signed_in(viewer):
                return Ended.signed_out
            if not await self.ctx.access.may(origin, session_id, Need.read):
                return Ended.no_access
            await clock.sleep(SIGNIN_CHECK_SECONDS)
