"""Time in one unit everywhere (Unix milliseconds), and one place that waits.

Everything that waits for time to pass — prompt expiry, retry backoff, presence refresh,
throttles — asks a `Clock` rather than `asyncio.sleep` or `time.monotonic` directly, so a test
can hand the runtime a clock it moves by hand instead of waiting in real time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Clock:
    """The real clock. Subclasses (in tests) replace all four methods together."""

    def now_ms(self) -> int:
        return now_ms()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_for(self, awaitable: Awaitable[T], seconds: float) -> T:
        """`awaitable`'s result, or TimeoutError (and `awaitable` canceled) after `seconds`."""
        # Awaited in place under a deadline: asyncio.wait_for would wrap it in a task of its
        # own, one more task for every waiter (every HTTP caller waits on its task).
        async with asyncio.timeout(seconds):
            return await awaitable


SYSTEM_CLOCK = Clock()
