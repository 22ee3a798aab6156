"""Who runs when: one task at a time per session, in queue order; sessions side by side, at
most `slots` tasks at once. A task parked on a prompt gives its slot back, so prompts left
open cannot starve other sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar


class Job(Protocol):
    """What the scheduler needs of a task (the engine's `Task` is one)."""

    session_id: str
    holds_slot: bool
    runner: asyncio.Task[None] | None

    @property
    def finished(self) -> bool: ...


J = TypeVar("J", bound=Job)


@dataclass(eq=False)
class _Lane(Generic[J]):
    waiting: deque[J] = field(default_factory=deque)
    current: J | None = None
    worker: asyncio.Task[None] | None = None


class Scheduler(Generic[J]):
    def __init__(
        self,
        slots: int,
        run: Callable[[J], Coroutine[Any, Any, None]],
        canceled_before_start: Callable[[J], Coroutine[Any, Any, None]],
    ) -> None:
        """`run` carries a task through its life (it is canceled to cancel the task);
        `canceled_before_start` records the end of one canceled while it was still queued."""
        self._run = run
        self._canceled_before_start = canceled_before_start
        self._slots = asyncio.Semaphore(slots)
        self._lanes: dict[str, _Lane[J]] = {}
        self._closing = False

    # -- queue -----------------------------------------------------------------------------

    def enqueue(self, task: J) -> int:
        """Queue `task` behind its session's others; returns how many are ahead of it."""
        lane: _Lane[J] = self._lanes.setdefault(task.session_id, _Lane())
        ahead = len(lane.waiting) + (1 if lane.current is not None else 0)
        lane.waiting.append(task)
        if lane.worker is None or lane.worker.done():
            lane.worker = asyncio.create_task(self._drain(task.session_id, lane))
        return ahead

    def current(self, session_id: str) -> J | None:
        lane = self._lanes.get(session_id)
        return lane.current if lane else None

    def queued(self, session_id: str) -> list[J]:
        lane = self._lanes.get(session_id)
        return list(lane.waiting) if lane else []

    def is_busy(self, session_id: str) -> bool:
        lane = self._lanes.get(session_id)
        return lane is not None and (lane.current is not None or bool(lane.waiting))

    def load(self) -> tuple[int, int]:
        """(running, queued) task counts over every session."""
        lanes = list(self._lanes.values())
        running = sum(1 for lane in lanes if lane.current is not None)
        return running, sum(len(lane.waiting) for lane in lanes)

    # -- cancel and shutdown ---------------------------------------------------------------

    async def cancel(self, task: J) -> bool:
        """Take a queued task off its queue, or cancel a running one; False if neither."""
        lane = self._lanes.get(task.session_id)
        if lane is None or task.finished:
            return False
        if task in lane.waiting:
            lane.waiting.remove(task)
            await self._canceled_before_start(task)
            return True
        if task.runner is not None:
            task.runner.cancel()
            return True
        return False

    async def close(self) -> None:
        """Stop running: tasks in flight are interrupted, queued ones stay unstarted."""
        self._closing = True
        workers = [lane.worker for lane in self._lanes.values() if lane.worker]
        for worker in workers:
            worker.cancel()
        for worker in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    # -- slots -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def parked(self, task: J) -> AsyncIterator[None]:
        """While the block runs (waiting for an answer), the task holds no slot. It gets one
        back to go on; a task canceled meanwhile ends without taking one."""
        self._release(task)
        yield
        await self._slots.acquire()
        task.holds_slot = True

    def _release(self, task: J) -> None:
        if task.holds_slot:
            task.holds_slot = False
            self._slots.release()

    # -- running ---------------------------------------------------------------------------

    async def _drain(self, session_id: str, lane: _Lane[J]) -> None:
        try:
            while lane.waiting and not self._closing:
                # The slot is for the lane's next task, whichever it is once one is free: the
                # head may be canceled meanwhile, and until then it counts as queued.
                await self._slots.acquire()
                if not lane.waiting:
                    self._slots.release()
                    break
                task = lane.waiting.popleft()
                task.holds_slot = True
                lane.current = task
                try:
                    task.runner = asyncio.create_task(self._run(task))
                    try:
                        await asyncio.shield(task.runner)
                    except asyncio.CancelledError:
                        worker = asyncio.current_task()
                        if worker is not None and worker.cancelling():
                            raise  # shutdown, handled below
                        # cancel() reached the run before it began: nothing has recorded the
                        # end yet, so it is recorded here.
                        if not task.finished:
                            await self._canceled_before_start(task)
                except asyncio.CancelledError:
                    # Shutdown: the task is interrupted, its journal kept for the next start.
                    if task.runner is not None and not task.runner.done():
                        task.runner.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task.runner
                    raise
                finally:
                    self._release(task)
                    lane.current = None
        finally:
            if not lane.waiting and self._lanes.get(session_id) is lane:
                del self._lanes[session_id]
