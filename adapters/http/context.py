"""What every handler of one app shares: the runtime, the caller's identity, the shutdown
signal, the metrics, and the lookups several resources make."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web

from adapters.http.errors import ApiError, no_session
from adapters.http.inputs import read_headers
from adapters.http.metrics import HttpMetrics
from adapters.http.models import Caller
from adapters.http.replies import OpenApiDocument
from adapters.http.sse import EventStream, sse_response
from gateway.engine.task import TaskNotFound, TaskView
from gateway.events import Origin
from gateway.ids import new_window_hash
from gateway.runtime import Runtime

T = TypeVar("T")


class Context:
    def __init__(
        self,
        runtime: Runtime,
        *,
        keepalive_seconds: float,
        document: Callable[[], OpenApiDocument],
    ) -> None:
        self.runtime = runtime
        self.router = runtime.router
        self.store = runtime.store
        self.settings = runtime.settings
        self.metrics = HttpMetrics(runtime.router)
        self.keepalive_seconds = keepalive_seconds
        self.closing = asyncio.Event()
        # Handed in: it is made from the route table, whose handlers import this module.
        self.openapi_document = document

    async def on_shutdown(self, app: web.Application) -> None:
        self.closing.set()

    def origin(self, request: web.Request) -> Origin:
        """Who is asking, from the identity headers (claims, not credentials)."""
        caller = read_headers(request, Caller)
        return Origin(
            caller.client,
            sender_id=caller.sender,
            sender_name=caller.sender_name or caller.sender,
            window_hash=caller.window or new_window_hash(),
        )

    async def require_session(self, session_id: str) -> None:
        if await self.store.get(session_id) is None:
            raise no_session(session_id)

    def task_of(self, session_id: str, task_hash: str) -> TaskView:
        """The task in this process's memory, if it belongs to `session_id`."""
        try:
            state = self.router.task(task_hash)
        except TaskNotFound:
            state = None
        if state is None or state.session_id != session_id:
            shown = task_hash if len(task_hash) <= 64 else task_hash[:64] + "…"
            raise ApiError(404, "not_found", f"no task {shown} in session {session_id}")
        return state

    async def until_closing(self, work: Awaitable[T]) -> T | None:
        """Await `work` unless the server starts shutting down first (then None)."""
        job = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self.closing.wait())
        try:
            await asyncio.wait({job, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not job.done():
                job.cancel()
        if job.done() and not job.cancelled():
            return job.result()
        with contextlib.suppress(asyncio.CancelledError):
            await job
        return None

    def event_stream(
        self, request: web.Request, extra_headers: dict[str, str] | None = None
    ) -> tuple[web.StreamResponse, EventStream]:
        """A new SSE response and the writer for it (nothing is sent until `start`)."""
        response = sse_response(extra_headers)
        stream = EventStream(
            request,
            response,
            closing=self.closing,
            keepalive=self.keepalive_seconds,
            clock=self.runtime.clock,
        )
        return response, stream
