"""The test clock: time moves only when a test says so."""

from __future__ import annotations

import asyncio

import pytest
from clock import FakeClock


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_sleep_wakes_once_time_passes_its_deadline() -> None:
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(2.0))
    await settle()
    clock.advance(1.5)
    await settle()
    assert not sleeper.done() and clock.sleepers == 1
    clock.advance(0.5)
    await asyncio.wait_for(sleeper, 1)
    assert clock.monotonic() == 2.0 and clock.sleepers == 0


async def test_wait_for_gives_the_result_or_times_out_when_time_passes() -> None:
    clock = FakeClock(start_ms=1_000)
    assert await clock.wait_for(asyncio.sleep(0, "done"), 5.0) == "done"

    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiter = asyncio.create_task(clock.wait_for(never, 5.0))
    await settle()
    clock.advance(5.0)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(waiter, 1)
    assert never.cancelled() and clock.now_ms() == 6_000
