"""Scheduling and arrival order on their own: no store, no agent, no files."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from structlog.testing import capture_logs

from gateway.engine.order import Turns
from gateway.engine.scheduler import Scheduler

pytestmark = pytest.mark.fast

WAIT = 5.0


@dataclass(eq=False)
class Job:
    session_id: str
    name: str
    sender: str = "ann"
    status: str = "queued"
    release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def finished(self) -> bool:
        return self.status in ("done", "canceled", "interrupted")

    @property
    def order(self) -> int:
        return self.place

    place: int = 0


class Rig:
    """A scheduler whose jobs run until the test releases them, recording what happened."""

    def __init__(
        self,
        slots: int,
        *,
        before_next: Callable[[str], Awaitable[None]] | None = None,
        on_idle: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.started: list[str] = []
        self.placed = 0
        self.log: list[str] = []
        self.changed = asyncio.Condition()
        self.scheduler: Scheduler[Job] = Scheduler(
            slots, self.run, self.canceled, before_next=before_next, on_idle=on_idle
        )

    async def run(self, job: Job) -> None:
        job.status = "running"
        await self.note(f"start {job.name}", started=job.name)
        try:
            await job.release.wait()
        except asyncio.CancelledError:
            job.status = "canceled"
            await self.note(f"cancel {job.name}")
            raise
        job.status = "done"
        await self.note(f"end {job.name}")

    async def canceled(self, job: Job) -> None:
        job.status = "canceled"
        await self.note(f"dropped {job.name}")

    async def note(self, line: str, *, started: str = "") -> None:
        async with self.changed:
            self.log.append(line)
            if started:
                self.started.append(started)
            self.changed.notify_all()

    async def until(self, line: str) -> None:
        async def seen() -> None:
            async with self.changed:
                await self.changed.wait_for(lambda: line in self.log)

        await asyncio.wait_for(seen(), WAIT)

    def add(self, session_id: str, name: str, place: int | None = None) -> tuple[Job, int]:
        """Queue a job; by default each comes after every earlier one (its `order`)."""
        self.placed += 1
        job = Job(session_id, name, place=self.placed if place is None else place)
        return job, self.scheduler.enqueue(job)


async def test_one_job_at_a_time_per_session_in_queue_order() -> None:
    rig = Rig(slots=8)
    jobs = [rig.add("cli-a", f"a{i}") for i in range(4)]
    assert [ahead for _, ahead in jobs] == [0, 1, 2, 3]
    for index, (job, _) in enumerate(jobs):
        await rig.until(f"start {job.name}")
        # Only this one has started since the last ended: the next waits for it.
        assert rig.started == [j.name for j, _ in jobs[: index + 1]]
        assert rig.scheduler.current("cli-a") is job
        assert rig.scheduler.queued("cli-a") == [j for j, _ in jobs[index + 1 :]]
        job.release.set()
        await rig.until(f"end {job.name}")
    assert not rig.scheduler.is_busy("cli-a")


async def test_sessions_run_side_by_side_within_the_slots() -> None:
    rig = Rig(slots=2)
    a, _ = rig.add("cli-a", "a")
    b, _ = rig.add("cli-b", "b")
    c, _ = rig.add("cli-c", "c")
    await rig.until("start a")
    await rig.until("start b")
    assert rig.scheduler.load() == (2, 1)  # c waits for a slot
    assert "start c" not in rig.log and rig.scheduler.current("cli-c") is None
    b.release.set()
    await rig.until("start c")  # b's slot went to c
    a.release.set()
    c.release.set()
    await rig.until("end c")


async def test_a_parked_job_gives_its_slot_back() -> None:
    rig = Rig(slots=1)
    parked_once = asyncio.Event()
    answer = asyncio.Event()

    async def run(job: Job) -> None:
        if job.name == "asks":
            async with rig.scheduler.parked(job):
                parked_once.set()
                await answer.wait()
        await Rig.run(rig, job)

    rig.scheduler = Scheduler(1, run, rig.canceled)
    asks, _ = rig.add("cli-a", "asks")
    other, _ = rig.add("cli-b", "other")
    await asyncio.wait_for(parked_once.wait(), WAIT)
    await rig.until("start other")  # ran while "asks" waited for its answer
    other.release.set()
    await rig.until("end other")
    answer.set()
    await rig.until("start asks")  # took a slot again to go on
    asks.release.set()
    await rig.until("end asks")


async def test_cancel_a_queued_job_and_a_running_one() -> None:
    rig = Rig(slots=4)
    first, _ = rig.add("cli-a", "first")
    second, _ = rig.add("cli-a", "second")
    third, _ = rig.add("cli-a", "third")
    await rig.until("start first")
    assert await rig.scheduler.cancel(second)
    assert rig.log[-1] == "dropped second" and rig.scheduler.queued("cli-a") == [third]
    assert await rig.scheduler.cancel(first)
    await rig.until("cancel first")
    await rig.until("start third")  # the lane goes on after a cancel
    assert not await rig.scheduler.cancel(second)  # already ended
    third.release.set()
    await rig.until("end third")


async def test_close_interrupts_running_jobs_and_leaves_queued_ones() -> None:
    rig = Rig(slots=4)
    running, _ = rig.add("cli-a", "running")
    queued, _ = rig.add("cli-a", "queued")
    await rig.until("start running")
    await rig.scheduler.close()
    # Its run was canceled, and close waited for it to end.
    assert running.status == "canceled" and "cancel running" in rig.log
    assert queued.status == "queued" and "start queued" not in rig.log


async def test_a_job_queued_late_takes_its_place_by_order() -> None:
    """Another instance stored a message before ones queued here: it runs before them."""
    rig = Rig(slots=4)
    first, _ = rig.add("cli-a", "first", place=10)
    rig.add("cli-a", "third", place=30)
    _, ahead = rig.add("cli-a", "second", place=20)
    assert ahead == 1  # behind "first", ahead of "third"
    await rig.until("start first")
    assert [j.name for j in rig.scheduler.queued("cli-a")] == ["second", "third"]
    first.release.set()
    await rig.until("start second")


async def test_interrupt_stops_one_session_and_hands_back_its_queue() -> None:
    rig = Rig(slots=4)
    running, _ = rig.add("cli-a", "running")
    queued, _ = rig.add("cli-a", "queued")
    other, _ = rig.add("cli-b", "other")
    await rig.until("start running")
    await rig.until("start other")
    assert await rig.scheduler.interrupt("cli-a") == [queued]
    assert running.status == "canceled" and "cancel running" in rig.log
    assert not rig.scheduler.is_busy("cli-a") and "start queued" not in rig.log
    assert rig.scheduler.current("cli-b") is other  # the other session goes on
    other.release.set()
    await rig.until("end other")


async def test_hooks_run_before_each_job_and_once_a_session_is_idle() -> None:
    calls: list[str] = []
    idle = asyncio.Event()

    async def before_next(session_id: str) -> None:
        calls.append(f"before {session_id} {len(rig.scheduler.queued(session_id))}")
        if len(calls) == 1:
            rig.add(session_id, "late", place=0)  # found by the hook: runs first

    async def on_idle(session_id: str) -> None:
        calls.append(f"idle {session_id}")
        idle.set()

    rig = Rig(slots=4, before_next=before_next, on_idle=on_idle)
    job, _ = rig.add("cli-a", "job")
    await rig.until("start late")
    assert rig.started == ["late"]
    for name in ("late", "job"):
        next(j for j in [rig.scheduler.current("cli-a")] if j and j.name == name).release.set()
        await rig.until(f"end {name}")
    await asyncio.wait_for(idle.wait(), WAIT)
    # Not before an empty queue: nothing waits there for what the hook would queue ahead.
    assert calls == ["before cli-a 1", "before cli-a 1", "idle cli-a"]
    assert job.status == "done"


async def test_a_failing_hook_leaves_the_queue_running() -> None:
    """The look before a task and the letting go meet an error (the database went away): the
    session's worker logs it and goes on, instead of dying with tasks queued behind it."""
    failures: list[str] = []
    idle = asyncio.Event()

    async def before_next(session_id: str) -> None:
        failures.append(f"before {session_id}")
        raise RuntimeError("the database went away")

    async def on_idle(session_id: str) -> None:
        failures.append(f"idle {session_id}")
        idle.set()
        raise RuntimeError("the database went away")

    rig = Rig(slots=2, before_next=before_next, on_idle=on_idle)
    with capture_logs() as logs:
        first, _ = rig.add("cli-a", "first")
        await rig.until("start first")
        second, _ = rig.add("cli-a", "second")  # queued behind it: the hook runs before it
        first.release.set()
        await rig.until("start second")
        second.release.set()
        await rig.until("end second")
        await asyncio.wait_for(idle.wait(), WAIT)  # raises and is logged in the same step
    assert (first.status, second.status) == ("done", "done")
    assert failures == ["before cli-a", "before cli-a", "idle cli-a"]
    failed = [e["event"] for e in logs if e["log_level"] == "error"]
    assert failed == [
        "before a session's next task failed; the queue goes on",
        "before a session's next task failed; the queue goes on",
        "letting an idle session go failed; the queue goes on",
    ]
    third, _ = rig.add("cli-a", "third")  # the session is served as before
    await rig.until("start third")
    third.release.set()
    await rig.until("end third")


async def test_a_run_that_fails_leaves_the_queue_running() -> None:
    """A run whose end could not be recorded raises out of it: the tasks behind it still run."""
    rig = Rig(slots=1)
    run = rig.run

    async def failing_first(job: Job) -> None:
        if job.name == "first":
            await rig.note("failing first")
            raise RuntimeError("its end met no database")
        await run(job)

    rig.scheduler._run = failing_first
    with capture_logs() as logs:
        rig.add("cli-a", "first")
        second, _ = rig.add("cli-a", "second")
        await rig.until("start second")
    second.release.set()
    await rig.until("end second")
    failed = [e["event"] for e in logs if e["log_level"] == "error"]
    assert failed == ["a task's run failed; the queue goes on"]
    assert rig.scheduler.load() == (0, 0)


async def test_turns_are_served_in_the_order_they_were_taken() -> None:
    turns = Turns()
    served: list[str] = []
    first, second, third = turns.take("s"), turns.take("s"), turns.take("s")
    other = turns.take("t")

    async def use(turn: object, name: str, pause: asyncio.Event | None = None) -> None:
        async with turn:  # type: ignore[attr-defined]
            if pause is not None:
                await pause.wait()
            served.append(name)

    hold = asyncio.Event()
    jobs = [
        asyncio.create_task(use(third, "third")),
        asyncio.create_task(use(second, "second")),
        asyncio.create_task(use(first, "first", hold)),
        asyncio.create_task(use(other, "other")),
    ]
    await asyncio.wait_for(jobs[3], WAIT)  # another session does not wait
    assert served == ["other"]
    hold.set()
    await asyncio.wait_for(asyncio.gather(*jobs), WAIT)
    assert served == ["other", "first", "second", "third"]
    assert not turns.waiting("s")


async def test_an_unused_turn_lets_later_ones_go_only_after_earlier_ones() -> None:
    turns = Turns()
    first = turns.take("s")
    skipped = turns.take("s")
    last = turns.take("s")
    with skipped:
        pass  # the message turned out to be nothing to store
    assert not skipped.ended  # it still waits for `first`
    entered = asyncio.Event()

    async def use_last() -> None:
        async with last:
            entered.set()

    job = asyncio.create_task(use_last())
    await asyncio.sleep(0)
    assert not entered.is_set()
    async with first:
        pass
    await asyncio.wait_for(job, WAIT)
    assert skipped.ended and entered.is_set()


async def test_a_canceled_wait_for_a_turn_does_not_block_the_next() -> None:
    turns = Turns()
    first = turns.take("s")
    waiting = turns.take("s")
    after = turns.take("s")
    await first.__aenter__()

    async def enter(turn: object) -> None:
        async with turn:  # type: ignore[attr-defined]
            pass

    gave_up = asyncio.create_task(enter(waiting))
    await asyncio.sleep(0)
    gave_up.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gave_up
    late = asyncio.create_task(enter(after))
    await first.__aexit__(None, None, None)
    await asyncio.wait_for(late, WAIT)
