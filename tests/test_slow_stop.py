"""A stop that hangs says where (every task's chain of awaits, every thread's stack, the
event loop's own included), and past its deadline the process is ended."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import MutableMapping
from typing import Any

from structlog.testing import capture_logs

from gateway.slow_stop import FORCED_EXIT_STATUS, SlowStopWatch


async def stuck_in_a_step(release: asyncio.Event) -> None:
    await release.wait()


async def test_a_slow_stop_names_the_await_and_the_thread_it_hangs_in() -> None:
    release = asyncio.Event()
    hung = asyncio.create_task(stuck_in_a_step(release), name="adapter stop")
    blocked = threading.Event()
    worker = threading.Thread(target=blocked.wait, name="writer", daemon=True)
    worker.start()
    exits: list[int] = []
    watch = SlowStopWatch(0.01, 60, exit=exits.append)
    try:
        with capture_logs() as logs:
            watch.arm()
            await asyncio.sleep(0)  # the hung task starts waiting
            for _ in range(500):  # the report comes from the watch's thread
                if logs:
                    break
                await asyncio.sleep(0.01)
        [entry] = logs
        assert entry["event"] == "shutdown slow"
        assert "stuck_in_a_step" in entry["tasks"]["adapter stop"]
        assert "wait" in entry["threads"]["writer"]
        assert "MainThread" in entry["threads"]  # where the event loop stands
    finally:
        watch.disarm()
        release.set()
        blocked.set()
        await hung
        worker.join(5)
    assert exits == []  # disarmed before its deadline


def test_a_stop_stuck_on_the_event_loop_itself_is_reported_and_ended() -> None:
    """The loop's thread blocks (a blocking call on it): the watch's thread still acts."""
    exited = threading.Event()
    exits: list[int] = []

    def record_exit(status: int) -> None:
        exits.append(status)
        exited.set()

    async def stop_that_blocks_the_loop() -> list[MutableMapping[str, Any]]:
        watch = SlowStopWatch(0.05, 0.1, exit=record_exit)
        with capture_logs() as logs:
            watch.arm()
            exited.wait(10)  # blocking, on the loop's own thread
            watch.disarm()
        return logs

    logs = asyncio.run(stop_that_blocks_the_loop())
    assert exits == [FORCED_EXIT_STATUS]
    assert [entry["event"] for entry in logs] == ["shutdown slow", "shutdown forced"]
    assert "stop_that_blocks_the_loop" in str(logs[0]["threads"]["MainThread"])


async def test_a_stop_that_ends_in_time_reports_nothing() -> None:
    exits: list[int] = []
    watch = SlowStopWatch(0.05, 0.1, exit=exits.append)
    with capture_logs() as logs:
        watch.arm()
        watch.disarm()
        assert watch.thread is not None
        watch.thread.join(5)  # the watch ends as soon as it is disarmed
        assert not watch.thread.is_alive()
    assert logs == [] and exits == []
