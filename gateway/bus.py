"""Signals between gateway instances: "a task was stored for this session", "this task has
an answer", "this task emitted an event".

Over Redis pub/sub when the KV store is Redis (several instances share it); in one process
otherwise, where a signal reaches this instance's own handlers. A signal only says where to
look: what it is about is always in the archive too, so a signal lost (an instance that was
not listening) costs latency, never data — the periodic recovery finds what it points at.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from gateway.logs import get_logger

log = get_logger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[None]]
CHANNEL_PREFIX = "agenvoy:"


class Bus(Protocol):
    def on(self, topic: str, handler: Handler) -> None:
        """Call `handler` with every message published on `topic` (by any instance)."""
        ...

    async def publish(self, topic: str, message: dict[str, Any]) -> None: ...

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

    def __init__(self) -> None:
        self._handlers = _Handlers()
        self._pending: set[asyncio.Task[None]] = set()

    def on(self, topic: str, handler: Handler) -> None:
        self._handlers.add(topic, handler)

    async def publish(self, topic: str, message: dict[str, Any]) -> None:
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


class RedisBus:
    def __init__(self, url: str, namespace: str = "") -> None:
        import redis.asyncio as aioredis

        # Deployments sharing one Redis do not hear each other: channels carry the database's
        # name.
        self._prefix = f"{CHANNEL_PREFIX}{namespace}:" if namespace else CHANNEL_PREFIX
        self._redis = aioredis.Redis.from_url(url, decode_responses=True)
        self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        self._handlers = _Handlers()
        self._reader: asyncio.Task[None] | None = None

    def on(self, topic: str, handler: Handler) -> None:
        self._handlers.add(topic, handler)

    async def start(self) -> None:
        channels = [self._prefix + topic for topic in self._handlers.by_topic]
        if channels:
            await self._pubsub.subscribe(*channels)
            self._reader = asyncio.create_task(self._read(), name="bus-reader")

    async def _read(self) -> None:
        while True:
            try:
                message = await self._pubsub.get_message(timeout=1.0)
            except Exception as exc:
                log.warning("signal bus read failed; retrying", error=repr(exc))
                await asyncio.sleep(1.0)
                continue
            if message is None:
                continue
            topic = str(message["channel"]).removeprefix(self._prefix)
            try:
                body = json.loads(message["data"])
            except (TypeError, ValueError):
                continue
            if isinstance(body, dict):
                await self._handlers.run(topic, body)

    async def publish(self, topic: str, message: dict[str, Any]) -> None:
        try:
            await self._redis.publish(self._prefix + topic, json.dumps(message))
        except Exception as exc:
            # The archive holds what the signal points at; recovery finds it without it.
            log.warning("signal not published", topic=topic, error=repr(exc))

    async def close(self) -> None:
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
