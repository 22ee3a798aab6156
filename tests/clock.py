"""A clock for tests: time moves only when the test moves it.

Pass it to `Runtime.start(settings, clock=clock)`. Whatever waits on it (prompt expiry,
retry backoff, the offline agent's `!sleep`, throttles) waits until the test calls `advance`,
so a test about a ten-minute expiry takes milliseconds and cannot race the machine's speed.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.clock import Clock

T = TypeVar("T")

START_MS = 1_780_000_000_000  # an arbitrary fixed wall-clock start


class FakeClock(Clock):
    def __init__(self) -> None:
        self._elapsed = 0.0  # seconds since the clock was made
        self._order = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._changed = asyncio.Condition()

    def now_ms(self) -> int:
        return START_MS + int(self._elapsed * 1000)

    def monotonic(self) -> float:
        return self._elapsed

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._elapsed + seconds, next(self._order), wake))
        async with self._changed:
            self._changed.notify_all()
        await wake

    async def wait_for(self, awaitable: Awaitable[T], seconds: float) -> T:
        work = asyncio.ensure_future(awaitable)
        timer = asyncio.ensure_future(self.sleep(seconds))
        try:
            await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not work.done():
                # A task is cancelled only once it has run again: until then it has no result.
                work.cancel()
                await asyncio.wait({work})
        if work.cancelled():
            raise TimeoutError
        return work.result()

    def waiting(self) -> list[float]:
        """How far ahead each current sleeper's deadline is, soonest first."""
        return sorted(d - self._elapsed for d, _, wake in self._sleepers if not wake.done())

    async def until_sleeping(
        self, count: int = 1, *, seconds: float | None = None, within: float = 5.0
    ) -> None:
        """Wait (in real time, at most `within` seconds) until `count` sleepers are waiting
        (only those due in exactly `seconds`, if given: a presence refresher is not a task's
        `!sleep`)."""

        def due() -> list[float]:
            waits = self.waiting()
            if seconds is not None:
                waits = [w for w in waits if abs(w - seconds) < 1e-9]
            return waits

        await self._until(lambda: len(due()) >= count, within)

    async def next_sleep(self, *, under: float, within: float = 5.0) -> float:
        """Wait (in real time) for a sleeper due in less than `under` seconds (a backoff, not
        a presence refresher); returns how far ahead it is due."""

        def soon() -> list[float]:
            return [w for w in self.waiting() if w < under]

        while True:
            await self._until(lambda: bool(soon()), within)
            found = soon()  # a sleeper canceled since the wait saw it is gone again
            if found:
                return found[0]

    async def _until(self, ready: Callable[[], bool], within: float) -> None:
        async def wait() -> None:
            async with self._changed:
                await self._changed.wait_for(ready)

        await asyncio.wait_for(wait(), within)

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking every sleeper whose deadline passes, in deadline order.

        Each woken sleeper gets the loop to itself for a moment, so a loop that sleeps again
        (a refresher, `!sleep 3`) is woken again within the same advance if its next deadline
        passes too."""
        target = self._elapsed + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, wake = heapq.heappop(self._sleepers)
            if wake.done():
                continue  # canceled sleeper
            self._elapsed = max(self._elapsed, deadline)
            wake.set_result(None)
            for _ in range(20):
                await asyncio.sleep(0)
        self._elapsed = target
        await asyncio.sleep(0)

    async def past_backoffs(self, work: Awaitable[T], *, under: float, within: float = 15) -> T:
        """Await `work`, moving time past every sleep due in less than `under` seconds (retry
        backoffs, not a presence refresher) as soon as one starts."""

        async def move_time() -> None:
            while True:
                await self.advance(await self.next_sleep(under=under, within=30))

        mover = asyncio.create_task(move_time())
        try:
            return await asyncio.wait_for(work, within)
        finally:
            mover.cancel()
