"""A clock for tests: time stands still until the test moves it.

Code under test sleeps and times out through it like through `gateway.clock.Clock`; the test
waits until something sleeps (`sleeping`), then moves time on (`advance`), which wakes every
sleep that is due. Nothing waits in real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Awaitable
from typing import TypeVar

from gateway.clock import Clock

T = TypeVar("T")

START_MS = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC


class ManualClock(Clock):
    def __init__(self, start_ms: int = START_MS) -> None:
        self._start_ms = start_ms
        self._elapsed = 0.0
        self._order = itertools.count()  # ties wake in the order they went to sleep
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._new_sleeper = asyncio.Event()

    def now_ms(self) -> int:
        return self._start_ms + round(self._elapsed * 1000)

    def monotonic(self) -> float:
        return self._elapsed

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self._elapsed + seconds, next(self._order), wake)
        heapq.heappush(self._sleepers, entry)
        self._new_sleeper.set()
        try:
            await wake
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)
                heapq.heapify(self._sleepers)

    async def wait_for(self, awaitable: Awaitable[T], seconds: float) -> T:
        work = asyncio.ensure_future(awaitable)
        timer = asyncio.ensure_future(self.sleep(seconds))
        try:
            await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
        if work.cancelled():
            raise TimeoutError
        return work.result()

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting for time to move."""
        return len(self._sleepers)

    async def sleeping(self, count: int = 1, within: float = 10.0) -> None:
        """Return once at least `count` sleeps wait for time to move (real-time bound)."""
        async with asyncio.timeout(within):
            while len(self._sleepers) < count:
                self._new_sleeper.clear()
                await self._new_sleeper.wait()

    def advance(self, seconds: float) -> None:
        """Move time on by `seconds`, waking every sleep that is due by then."""
        self._elapsed += seconds
        while self._sleepers and self._sleepers[0][0] <= self._elapsed:
            _, _, wake = heapq.heappop(self._sleepers)
            if not wake.done():
                wake.set_result(None)
