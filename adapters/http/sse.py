"""Server-sent event streams: the frame format and a writer that keeps idle streams alive.

The framing, and what the frames of each stream carry, are described in docs/events.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, NoReturn, TypeVar

from aiohttp import web

from adapters.http.errors import ApiError
from adapters.http.replies import Restarting
from adapters.http.standing import CHECK_SECONDS, REVOKED, Standing
from gateway.clock import Clock

T = TypeVar("T")

KEEPALIVE_SECONDS: Final = 15.0
# How often an idle stream checks that its client is still there and the server still up.
POLL_SECONDS: Final = 1.0
SSE_HEADERS: Final = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # a buffering proxy would hold frames back
}
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")


def sse_frame(kind: str, data: str, frame_id: int | None = None) -> bytes:
    """One server-sent event: `event:`, `id:` and `data:` lines, then a blank line."""
    lines = [f"event: {kind}"]
    if frame_id is not None:
        lines.append(f"id: {frame_id}")
    lines.extend(f"data: {part}" for part in _LINE_BREAK.split(data))
    return ("\n".join(lines) + "\n\n").encode()


def sse_response(extra_headers: Mapping[str, str] | None = None) -> web.StreamResponse:
    return web.StreamResponse(status=200, headers={**SSE_HEADERS, **(extra_headers or {})})


class StreamClosed(Exception):
    """The client went away, the server is shutting down, or the caller's credential was
    revoked: stop writing."""


class _Woken:
    """What `_next` gives when the credentials changed before an item came."""


_WOKEN: Final = _Woken()


def restarting_error(farewell: Restarting) -> ApiError:
    """The answer of a request the gateway cannot finish because it is shutting down."""
    message = f"the gateway is restarting; ask {farewell.resume} again once it is back"
    headers = {"Retry-After": str(farewell.retry_after), "X-Agenvoy-Session": farewell.session_id}
    if farewell.task_hash is not None:
        headers["X-Agenvoy-Task"] = farewell.task_hash
    return ApiError(503, "restarting", message, headers)


class EventStream:
    """Writes SSE frames to one response, numbering them, and notices when to stop: when the
    server shuts down, a last `restarting` frame (`farewell`) says what to ask for later; when
    the caller's credential no longer stands (`standing`), a last `revoked` frame."""

    def __init__(
        self,
        request: web.Request,
        response: web.StreamResponse,
        *,
        closing: asyncio.Event,
        keepalive: float,
        clock: Clock,
        farewell: Restarting,
        standing: Standing | None = None,
    ) -> None:
        self._request = request
        self._response = response
        self._closing = closing
        self._farewell = farewell
        self._keepalive = keepalive
        self._poll = min(POLL_SECONDS, keepalive)
        self._clock = clock
        self._last_write = clock.monotonic()
        self._frames = 0
        self._standing = standing
        self._change: asyncio.Future[None] | None = None
        self._stood_at = clock.monotonic()

    async def _check_open(self) -> None:
        transport = self._request.transport
        if transport is None or transport.is_closing():
            raise StreamClosed
        if self._closing.is_set():
            await self._say_restarting()

    async def _check_standing(self) -> None:
        """End the stream once the caller's credential no longer stands: checked when the
        credentials change and at least every `CHECK_SECONDS`."""
        standing = self._standing
        if standing is None:
            return
        now = self._clock.monotonic()
        change = self._change
        if change is not None and not change.done() and now - self._stood_at < CHECK_SECONDS:
            return
        self._change, self._stood_at = standing.changed(), now
        if await standing.holds():
            return
        self._frames += 1
        frame = sse_frame("revoked", json.dumps({"reason": REVOKED}), self._frames)
        with contextlib.suppress(ConnectionError):
            await self._response.write(frame)
            await self._response.write_eof()
        raise StreamClosed

    async def _say_restarting(self) -> NoReturn:
        self._frames += 1
        frame = sse_frame("restarting", self._farewell.model_dump_json(), self._frames)
        # The client may be gone already; there is nobody to tell then.
        with contextlib.suppress(ConnectionError):
            await self._response.write(frame)
            await self._response.write_eof()
        raise StreamClosed

    async def start(self) -> None:
        """Send the status line and headers; a server already shutting down answers 503."""
        if self._closing.is_set():
            raise restarting_error(self._farewell)
        await self._check_open()
        try:
            await self._response.prepare(self._request)
        except ConnectionError:
            raise StreamClosed from None
        self._last_write = self._clock.monotonic()

    async def _write(self, data: bytes) -> None:
        await self._check_open()
        try:
            await self._response.write(data)
        except ConnectionError:
            raise StreamClosed from None
        self._last_write = self._clock.monotonic()

    async def frame(self, kind: str, data: str) -> None:
        """The next frame; ids count from 1 in each stream."""
        self._frames += 1
        await self._write(sse_frame(kind, data, self._frames))

    async def comment(self, text: str) -> None:
        await self._write(f": {text}\n\n".encode())

    async def receive(self, get: Callable[[], Awaitable[T]]) -> T:
        """The next item from `get`, writing keep-alive comments while there is none; raises
        StreamClosed as soon as the server starts shutting down or the caller's credential
        is revoked."""
        while True:
            await self._check_open()
            await self._check_standing()
            try:
                item = await self._clock.wait_for(self._next(get), self._poll)
            except TimeoutError:
                if self._clock.monotonic() - self._last_write >= self._keepalive:
                    await self.comment("keepalive")
                continue
            if not isinstance(item, _Woken):
                return item

    async def _next(self, get: Callable[[], Awaitable[T]]) -> T | _Woken:
        item = asyncio.ensure_future(get())
        stop = asyncio.ensure_future(self._closing.wait())
        watched: set[asyncio.Future[Any]] = {item, stop}
        if self._change is not None:
            watched.add(self._change)
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not item.done():
                item.cancel()
        if item.done() and not item.cancelled():
            return item.result()
        if not self._closing.is_set():
            return _WOKEN
        await self._check_open()
        raise StreamClosed

    async def end(self) -> None:
        # A client that left between the last frame and the end of the body missed nothing.
        with contextlib.suppress(ConnectionError):
            await self._response.write_eof()
