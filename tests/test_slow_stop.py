"""A stop that hangs says where: every task's chain of awaits and every thread's stack."""

from __future__ import annotations

import asyncio
import threading

from structlog.testing import capture_logs

from gateway.slow_stop import SlowStopReport


async def stuck_in_a_step(release: asyncio.Event) -> None:
    await release.wait()


async def test_a_slow_stop_names_the_await_and_the_thread_it_hangs_in() -> None:
    release = asyncio.Event()
    hung = asyncio.create_task(stuck_in_a_step(release), name="adapter stop")
    blocked = threading.Event()
    worker = threading.Thread(target=blocked.wait, name="writer", daemon=True)
    worker.start()
    report = SlowStopReport(0.01)
    try:
        with capture_logs() as logs:
            report.arm()
            for _ in range(200):  # the report is a timer callback: let the loop run it
                if logs:
                    break
                await asyncio.sleep(0.01)
        [entry] = logs
        assert entry["event"] == "shutdown slow"
        assert "stuck_in_a_step" in entry["tasks"]["adapter stop"]
        assert "wait" in entry["threads"]["writer"]
    finally:
        report.disarm()
        release.set()
        blocked.set()
        await hung
        worker.join(5)


async def test_a_stop_that_ends_in_time_reports_nothing() -> None:
    report = SlowStopReport(0.05)
    with capture_logs() as logs:
        report.arm()
        report.disarm()
        await asyncio.sleep(0.1)
    assert logs == []
