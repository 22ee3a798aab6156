"""A clock a test moves by hand: throttles, timeouts and backoff without real waiting."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from gateway.clock import Clock

T = TypeVar("T")


class FakeClock(Clock):
    """Time stands still until `advance`; whatever sleeps or waits past the new time wakes."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._start_ms = start_ms
        self._elapsed = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now_ms(self) -> int:
        return self._start_ms + round(self._elapsed * 1000)

    def monotonic(self) -> float:
        return self._elapsed

    def advance(self, seconds: float) -> None:
        """Move time on by `seconds` and wake every sleeper whose deadline has come."""
        self._elapsed += seconds
        waiting = []
        for deadline, future in self._sleepers:
            if future.done():
                continue
            if deadline <= self._elapsed:
                future.set_result(None)
            else:
                waiting.append((deadline, future))
        self._sleepers = waiting

    @property
    def sleepers(self) -> int:
        """How many sleeps and waits are waiting for time to move."""
        return sum(not future.done() for _, future in self._sleepers)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._elapsed + seconds, future))
        await future

    async def wait_for(self, awaitable: Awaitable[T], seconds: float) -> T:
        work = asyncio.ensure_future(awaitable)
        timer = asyncio.ensure_future(self.sleep(seconds))
        try:
            await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            raise
        finally:
            timer.cancel()
        if work.done():
            return work.result()
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        raise TimeoutError
