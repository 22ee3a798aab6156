"""Signals between gateway instances: "a task was stored for this session", "this task has
an answer", "this task emitted an event".

Over Redis pub/sub when the KV store is Redis (several instances share it); in one process
otherwise, where a signal reaches this instance's own handlers. A signal only says where to
look: what it is about is always in the archive too, so a signal lost (an instance that was
not listening) costs latency, never data — the periodic recovery finds what it points at.

While the Redis bus is cut off, and for a moment after it is back (the other instances
subscribe again on their own ticks), its gap handlers run about once a second: each looks in
the archive for what a lost signal would have said, so nobody waits on a signal that will not
come. A signal published with `keep` that could not be sent is sent again once the bus is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from gateway.logs import get_logger

log = get_logger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[None]]
GapHandler = Callable[[], Awaitable[None]]
CHANNEL_PREFIX = "agenvoy:"
# How often, while signals may be lost, the archive is looked at in their stead (and the bus
# tried again).
GAP_TICK_SECONDS = 1.0
# Back here is not yet back everywhere: another instance subscribes again on its next try.
GAP_TAIL_SECONDS = 3.0
# One look must not hold up the reader (and with it the bus's return) for long.
GAP_LOOK_SECONDS = 5.0
KEPT_SIGNALS = 1000


class Bus(Protocol):
    # Whether a signal reaches other instances (Redis), or only this one's own handlers.
    reaches_others: bool

    def on(self, topic: str, handler: Handler) -> None:
        """Call `handler` with every message published on `topic` (by any instance)."""
        ...

    def on_gap(self, handler: GapHandler) -> None:
        """Call `handler` about once a second while signals may have been lost (the bus is cut
        off, or came back a moment ago): it looks in the archive for what they would have
        said."""
        ...

    async def publish(self, topic: str, message: dict[str, Any], *, keep: bool = False) -> None:
        """Send a signal to every instance; with `keep`, one that cannot be sent now is sent
        again once the bus is back (for signals that say the same when repeated)."""
        ...

    async def start(self) -> None:
        """Begin listening, once every handler is registered."""
        ...

    async def close(self) -> None: ...


class _Handlers:
    def __init__(self) -> None:
        self.by_topic: dict[str, list[Handler]] = {}

    def add(self, topic: str, handler: Handler) -> None:
        self.by_topic.setdefault(topic, []).append(handler)

    async def run(self, topic: str, message: dict[str, Any]) -> None:
        for handler in self.by_topic.get(topic, ()):
            try:
                await handler(message)
            except Exception:
                log.exception("signal handler failed", topic=topic)


class LocalBus:
    """One instance: a signal reaches its own handlers, soon after it is published."""

    reaches_others = False

    def __init__(self) -> None:
        self._handlers = _Handlers()
        self._pending: set[asyncio.Task[None]] = set()

    def on(self, topic: str, handler: Handler) -> None:
        self._handlers.add(topic, handler)

    def on_gap(self, handler: GapHandler) -> None:
        """In one process no signal is ever lost."""

    async def publish(self, topic: str, message: dict[str, Any], *, keep: bool = False) -> None:
        # Not inline: a publisher must not find itself inside its own handler.
        job = asyncio.create_task(self._handlers.run(topic, message))
        self._pending.add(job)
        job.add_done_callback(self._pending.discard)

    async def start(self) -> None:
        """Nothing to connect to."""

    async def close(self) -> None:
        for job in list(self._pending):
            job.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)


class _Gap:
    """Whether signals may be lost right now, what stands in for them, and what to send again."""

    def __init__(self) -> None:
        self.handlers: list[GapHandler] = []
        self.down = False  # cut off: a read or a publish failed, and the bus is not back
        self._until = 0.0  # after it came back, looks go on until this (monotonic) time
        self._looked = 0.0
        self.kept: deque[tuple[str, str]] = deque(maxlen=KEPT_SIGNALS)

    def cut(self, error: Exception) -> None:
        if not self.down:
            log.warning("signal bus cut off; looking in the archive meanwhile", error=repr(error))
        self.down = True

    def back(self) -> None:
        log.info("signal bus back")
        self.down = False
        self._until = time.monotonic() + GAP_TAIL_SECONDS

    def open(self) -> bool:
        return self.down or time.monotonic() < self._until

    async def look(self) -> None:
        now = time.monotonic()
        if now - self._looked < GAP_TICK_SECONDS:
            return
        self._looked = now
        for handler in self.handlers:
            try:
                async with asyncio.timeout(GAP_LOOK_SECONDS):  # see _reachable
                    await handler()
            except Exception as exc:
                log.warning("a look in the archive for lost signals failed", error=repr(exc))


class RedisBus:
    reaches_others = True

    def __init__(self, url: str, namespace: str = "") -> None:
        import redis.asyncio as aioredis

        # Deployments sharing one Redis do not hear each other: channels carry the database's
        # name.
        self._prefix = f"{CHANNEL_PREFIX}{namespace}:" if namespace else CHANNEL_PREFIX
        self._redis = aioredis.Redis.from_url(url, decode_responses=True)
        self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        self._handlers = _Handlers()
        self._gap = _Gap()
        self._reader: asyncio.Task[None] | None = None
        self._closing = False

    def on(self, topic: str, handler: Handler) -> None:
        self._handlers.add(topic, handler)

    def on_gap(self, handler: GapHandler) -> None:
        self._gap.handlers.append(handler)

    @property
    def cut_off(self) -> bool:
        """Whether signals may be lost right now."""
        return self._gap.down

    async def start(self) -> None:
        channels = [self._prefix + topic for topic in self._handlers.by_topic]
        if channels:
            await self._pubsub.subscribe(*channels)
            self._reader = asyncio.create_task(self._read(), name="bus-reader")

    async def _read(self) -> None:
        # Stopped by a flag as well as by the cancel: redis-py can lose a cancellation that
        # lands inside its read's timeout, and the loop would then go on for ever (a stop
        # that hung until it was forced).
        while not self._closing:
            try:
                # On a connection that failed, this connects again and subscribes again.
                message = await self._pubsub.get_message(timeout=GAP_TICK_SECONDS)
            except Exception as exc:
                self._gap.cut(exc)
                await self._gap.look()
                await asyncio.sleep(GAP_TICK_SECONDS)
                continue
            if self._gap.down and await self._reachable():
                self._gap.back()
                await self._send_kept()
            if self._gap.open():
                await self._gap.look()
            if message is None:
                continue
            topic = str(message["channel"]).removeprefix(self._prefix)
            try:
                body = json.loads(message["data"])
            except (TypeError, ValueError):
                continue
            if isinstance(body, dict):
                await self._handlers.run(topic, body)

    async def _reachable(self) -> bool:
        """Whether signals can be sent again (the reader hears again already)."""
        try:
            # asyncio.timeout, not asyncio.wait_for: on Python 3.11 a wait_for that completes
            # just as the reader is canceled swallows the cancellation, and close() hangs.
            async with asyncio.timeout(GAP_TICK_SECONDS):
                await self._redis.ping()
        except Exception:
            return False
        return True

    async def _send_kept(self) -> None:
        kept = self._gap.kept
        while kept:
            topic, data = kept[0]
            if not await self._send(topic, data):
                return
            kept.popleft()

    async def _send(self, topic: str, data: str) -> bool:
        try:
            await self._redis.publish(self._prefix + topic, data)
        except Exception as exc:
            # The archive holds what the signal points at; the looks find it without it.
            log.warning("signal not published", topic=topic, error=repr(exc))
            self._gap.cut(exc)
            return False
        return True

    async def publish(self, topic: str, message: dict[str, Any], *, keep: bool = False) -> None:
        data = json.dumps(message)
        if not await self._send(topic, data) and keep:
            self._gap.kept.append((topic, data))

    async def close(self) -> None:
        self._closing = True
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        # Typed in some redis releases and not in others.
        pubsub: Any = self._pubsub
        with contextlib.suppress(Exception):
            await pubsub.aclose()
        with contextlib.suppress(Exception):
            await self._redis.aclose()


def open_bus(kv_url: str, namespace: str = "") -> Bus:
    """Redis pub/sub when the KV store is Redis (what several instances share), on channels
    named after `namespace`; in-process otherwise."""
    if kv_url.partition("://")[0].lower() in ("redis", "rediss"):
        return RedisBus(kv_url, namespace)
    return LocalBus()
