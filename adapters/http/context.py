"""What every handler of one app shares: the runtime, the caller's identity, the shutdown
signal, the metrics, and the lookups several resources make."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from aiohttp import web

from adapters.http.errors import ApiError, no_session
from adapters.http.identity import IDENTITY
from adapters.http.inputs import read_headers
from adapters.http.metrics import HttpMetrics
from adapters.http.models import MAX_WAIT_SECONDS, Caller
from adapters.http.replies import OpenApiDocument, Restarting
from adapters.http.sse import EventStream, restarting_error, sse_response
from adapters.http.standing import REVOKED, current
from gateway.access import SessionAccess
from gateway.engine import TaskNotFound, TaskView
from gateway.events import Origin
from gateway.ids import new_window_hash
from gateway.runtime import Runtime

T = TypeVar("T")

# What a client is told to wait, after a shutdown, before it asks again.
RETRY_AFTER_SECONDS: Final = 5


class Context:
    def __init__(
        self,
        runtime: Runtime,
        access: SessionAccess,
        *,
        keepalive_seconds: float,
        document: Callable[[], OpenApiDocument],
        http_identities: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        self.runtime = runtime
        self.router = runtime.router
        self.store = runtime.store
        self.settings = runtime.settings
        self.access = access
        models = runtime.model_stats
        self.metrics = HttpMetrics(
            runtime.router, runtime.tool_memory.cache, models, runtime.store.outbox
        )
        self.keepalive_seconds = keepalive_seconds
        self.closing = asyncio.Event()
        # Set with `closing`: one future every waiting request watches, where a task per
        # request waiting on the event cost a task and its cancellation each time.
        self._closed: asyncio.Future[None] | None = None
        # Handed in: it is made from the route table, whose handlers import this module.
        self.openapi_document = document
        # The HTTP identities that hold a credential now (gateway/credentials.py).
        self.http_identities = http_identities

    async def on_shutdown(self, app: web.Application) -> None:
        self.closing.set()
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def _closed_future(self) -> asyncio.Future[None]:
        if self._closed is None:
            self._closed = asyncio.get_running_loop().create_future()
            if self.closing.is_set():
                self._closed.set_result(None)
        return self._closed

    @staticmethod
    def caller(request: web.Request) -> Origin:
        """Who is asking, as their credential says, and nothing else (no headers read)."""
        identity = request[IDENTITY]
        return Origin(
            identity.platform,
            sender_id=identity.sender_id,
            sender_name=identity.sender_name,
            window_hash=identity.window_hash,
        )

    def origin(self, request: web.Request) -> Origin:
        """Who is asking, as their credential says. A terminal window's hash comes with its
        credential; any other caller's `X-Agenvoy-Window` is a label on its tasks' events,
        which grants nothing."""
        identity = request[IDENTITY]
        if identity.platform == "terminal":
            window = identity.window_hash
        else:
            window = read_headers(request, Caller).window or new_window_hash()
        return Origin(
            identity.platform,
            sender_id=identity.sender_id,
            sender_name=identity.sender_name,
            window_hash=window,
        )

    @staticmethod
    def farewell(session_id: str, task_hash: str | None = None) -> Restarting:
        """What a caller is told to ask for again when a shutdown cuts its request short."""
        if task_hash is None:
            resume = f"GET /v1/session/{session_id}/log"
        else:
            resume = f"GET /v1/session/{session_id}/task/{task_hash}?wait={MAX_WAIT_SECONDS:g}"
        return Restarting(
            session_id=session_id,
            task_hash=task_hash,
            retry_after=RETRY_AFTER_SECONDS,
            resume=resume,
        )

    async def require_session(self, session_id: str) -> None:
        if not await self.store.exists(session_id):
            raise no_session(session_id)

    async def task_of(self, session_id: str, task_hash: str) -> TaskView:
        """The task, if it belongs to `session_id`: known here, or run by another instance."""
        try:
            state = await self.router.find(task_hash)
        except TaskNotFound:
            state = None
        if state is None and self.router.taking_up:
            # Perhaps a task the previous life of this gateway left unfinished: it is taken
            # up before the gateway says it is ready.
            message = "the gateway is starting and has not taken up unfinished tasks yet"
            raise ApiError(503, "starting", message, {"Retry-After": "1"})
        if state is None or state.session_id != session_id:
            shown = task_hash if len(task_hash) <= 64 else task_hash[:64] + "…"
            raise ApiError(404, "not_found", f"no task {shown} in session {session_id}")
        return state

    async def until_closing(self, work: Awaitable[T], farewell: Restarting) -> T:
        """Await `work`; if the server starts shutting down first, answer 503 `restarting`
        with `farewell`'s route to ask again; if the caller's credential is revoked first,
        403 (adapters/http/standing.py)."""
        job = asyncio.ensure_future(work)
        standing = current()
        try:
            while True:
                watched: set[asyncio.Future[Any]] = {job, self._closed_future()}
                if standing is None:
                    await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                    break
                # Every change of the credentials is announced (the issued tokens are watched):
                # nothing else can revoke what a request came with.
                watched.add(standing.changed())
                await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                if job.done() or self._closed_future().done():
                    break
                if not await standing.holds():
                    raise ApiError(403, "forbidden", REVOKED)
        finally:
            if not job.done():
                job.cancel()
        if job.done() and not job.cancelled():
            return job.result()
        with contextlib.suppress(asyncio.CancelledError):
            await job
        raise restarting_error(farewell)

    def event_stream(
        self,
        request: web.Request,
        farewell: Restarting,
        extra_headers: dict[str, str] | None = None,
    ) -> tuple[web.StreamResponse, EventStream]:
        """A new SSE response and the writer for it (nothing is sent until `start`)."""
        response = sse_response(extra_headers)
        stream = EventStream(
            request,
            response,
            closing=self.closing,
            keepalive=self.keepalive_seconds,
            clock=self.runtime.clock,
            farewell=farewell,
            standing=current(),
        )
        return response, stream
