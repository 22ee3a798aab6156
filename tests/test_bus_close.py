"""The Redis bus closes even when its reader lost the cancellation meant to stop it, as
redis-py's client can when the cancel lands inside its read's timeout: the stop used to hang
until the gateway forced it."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from support import REDIS_URL, open_redis

from gateway.bus import RedisBus


async def test_a_reader_that_loses_the_cancel_still_lets_the_bus_close() -> None:
    kv = await open_redis()  # skips, or fails in CI, without a Redis to talk to
    await kv.close()
    bus = RedisBus(REDIS_URL, namespace=f"close-{uuid.uuid4().hex}")

    async def ignored(message: dict[str, Any]) -> None:
        return None

    bus.on("topic", ignored)
    real = bus._pubsub.get_message
    reading = asyncio.Event()
    lost = 0

    async def losing(*args: Any, **kwargs: Any) -> Any:
        nonlocal lost
        if lost:  # once: a reader that never stops must not outlive the test
            return await real(*args, **kwargs)
        reading.set()
        try:
            await asyncio.Event().wait()  # the read in flight, until it is canceled
        except asyncio.CancelledError:
            lost += 1  # and not raised again
        return None

    bus._pubsub.get_message = losing  # type: ignore[method-assign]
    await bus.start()
    await asyncio.wait_for(reading.wait(), 10)
    started = time.monotonic()
    # Bounded, or the old loop would hold the test for ever: it read on, tick after tick.
    await asyncio.wait_for(bus.close(), 10)
    assert lost == 1
    # Within a read's tick (GAP_TICK_SECONDS), with room for a loaded machine; the bound
    # above would stop a close that waited for ever, not tell it from this one.
    assert time.monotonic() - started < 5
