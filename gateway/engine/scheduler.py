"""Who runs when: one task at a time per session, in queue order; sessions side by side, at
most `slots` tasks at once, and at most `per_sender` of them for any one sender, so one client
cannot take every slot. A sender counts as the person it belongs to (`counts_as`: identities
linked together share one count), whose running limit `slots_for` may set. Lanes queue for a
slot first come, first served, and go to the back after each task: sessions share the slots
in turn. A task parked on a prompt gives its slots back, so prompts left open cannot starve
anyone.

A session's queue is kept in archive order (`Job.order`): tasks another instance stored for a
session run here in the order their messages were archived, not the order they arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from gateway.logs import get_logger

log = get_logger(__name__)


class Job(Protocol):
    """What the scheduler needs of a task (the engine's `Task` is one)."""

    session_id: str

    @property
    def sender(self) -> str: ...

    @property
    def order(self) -> int:
        """Where the task stands in its session (its message's archive id)."""
        ...

    @property
    def finished(self) -> bool: ...


J = TypeVar("J", bound=Job)

# Where a task stands: its run has begun (a task parked on a prompt included), it heads its
# session's queue with nothing of its session running (it waits for a slot), or it waits
# behind another task of its session.
Stage = Literal["running", "waiting_for_slot", "queued"]


@dataclass(eq=False)
class _Lane(Generic[J]):
    waiting: deque[J] = field(default_factory=deque)
    current: J | None = None
    worker: asyncio.Task[None] | None = None


@dataclass(eq=False)
class _Sender:
    slots: asyncio.Semaphore
    tasks: int = 0  # queued or running


class Scheduler(Generic[J]):
    def __init__(
        self,
        slots: int,
        run: Callable[[J], Coroutine[Any, Any, None]],
        canceled_before_start: Callable[[J], Coroutine[Any, Any, None]],
        *,
        per_sender: int | None = None,
        before_next: Callable[[str], Awaitable[None]] | None = None,
        on_idle: Callable[[str], Awaitable[None]] | None = None,
        gather: Callable[[str, list[J]], Awaitable[None]] | None = None,
        counts_as: Callable[[str], str] | None = None,
        slots_for: Callable[[str], int] | None = None,
    ) -> None:
        """`run` carries a task through its life (it is canceled to cancel the task);
        `canceled_before_start` records the end of one canceled while it was still queued."""
        self._run = run
        self._canceled_before_start = canceled_before_start
        self._slots = asyncio.Semaphore(slots)
        self._per_sender = per_sender or slots
        self._senders: dict[str, _Sender] = {}
        self._counts_as = counts_as or (lambda sender: sender)
        self._slots_for = slots_for or (lambda key: self._per_sender)
        # The key each queued or running task counts under, fixed when it was queued: a link
        # made meanwhile must not move it between counts.
        self._keys: dict[J, str] = {}
        self._lanes: dict[str, _Lane[J]] = {}
        # The tasks holding a slot, and the asyncio task of each one that has started.
        self._holding: set[J] = set()
        self._runs: dict[J, asyncio.Task[None]] = {}
        self._closing = False
        # Called with a session id before its next task is picked, when one waits (to queue
        # ahead of it what other instances stored before it); and once its queue is empty (to
        # let it go: what another instance stores for an idle session arrives by its signal,
        # or is found when the session is let go).
        self.before_next = before_next
        self.on_idle = on_idle
        # Called with a session id and its queue when several tasks wait there, before the
        # next is picked: it may take some out (the `collect` queue mode).
        self.gather = gather

    # -- queue -----------------------------------------------------------------------------

    def enqueue(self, task: J) -> int:
        """Queue `task` behind its session's others; returns how many are ahead of it."""
        lane: _Lane[J] = self._lanes.setdefault(task.session_id, _Lane())
        at = len(lane.waiting)
        while at and lane.waiting[at - 1].order > task.order:
            at -= 1
        lane.waiting.insert(at, task)
        ahead = at + (1 if lane.current is not None else 0)
        self._sender(self._key(task)).tasks += 1
        if lane.worker is None or lane.worker.done():
            lane.worker = asyncio.create_task(self._drain(task.session_id, lane))
        return ahead

    def current(self, session_id: str) -> J | None:
        lane = self._lanes.get(session_id)
        return lane.current if lane else None

    def queued(self, session_id: str) -> list[J]:
        lane = self._lanes.get(session_id)
        return list(lane.waiting) if lane else []

    def stage(self, task: J) -> Stage | None:
        """Where `task` stands here; None when it is not queued or running here."""
        lane = self._lanes.get(task.session_id)
        if lane is None or task.finished:
            return None
        if task in self._runs or lane.current is task:
            return "running"
        if task not in lane.waiting:
            return None
        return "waiting_for_slot" if lane.current is None and lane.waiting[0] is task else "queued"

    def is_busy(self, session_id: str) -> bool:
        lane = self._lanes.get(session_id)
        return lane is not None and (lane.current is not None or bool(lane.waiting))

    def sessions(self) -> list[str]:
        """The sessions with tasks running or queued."""
        return list(self._lanes)

    def load(self) -> tuple[int, int]:
        """(running, queued) task counts over every session."""
        lanes = list(self._lanes.values())
        running = sum(1 for lane in lanes if lane.current is not None)
        return running, sum(len(lane.waiting) for lane in lanes)

    def tasks_of(self, sender: str) -> int:
        """How many tasks of `sender` are queued or running."""
        state = self._senders.get(self._counts_as(sender))
        return state.tasks if state else 0

    def take_out(self, task: J) -> bool:
        """Take a queued task off its queue without ending it (its caller ends it); False
        when it is not queued any more."""
        lane = self._lanes.get(task.session_id)
        if lane is None or task not in lane.waiting:
            return False
        lane.waiting.remove(task)
        self._left(task)
        return True

    # -- cancel and shutdown ---------------------------------------------------------------

    async def cancel(self, task: J) -> bool:
        """Take a queued task off its queue, or cancel a running one; False if neither."""
        lane = self._lanes.get(task.session_id)
        if lane is None or task.finished:
            return False
        if task in lane.waiting:
            lane.waiting.remove(task)
            self._left(task)
            await self._canceled_before_start(task)
            return True
        run = self._runs.get(task)
        if run is not None:
            run.cancel()
            return True
        return False

    async def interrupt(self, session_id: str) -> list[J]:
        """Stop the session here: its running task is interrupted (its journal kept), and its
        queued ones are dropped unstarted and returned. Another instance takes them up."""
        lane = self._lanes.pop(session_id, None)
        if lane is None:
            return []
        dropped = list(lane.waiting)
        lane.waiting.clear()
        for task in dropped:
            self._left(task)
        if lane.worker is not None and not lane.worker.done():
            lane.worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lane.worker
        return dropped

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
        """While the block runs (waiting for an answer), the task holds no slot. It gets its
        slots back to go on; a task canceled meanwhile ends without taking them."""
        self._release(task)
        yield
        await self._sender(self._key(task)).slots.acquire()
        await self._slots.acquire()
        self._holding.add(task)

    def _release(self, task: J) -> None:
        if task in self._holding:
            self._holding.discard(task)
            self._slots.release()
            self._sender(self._key(task)).slots.release()

    def _key(self, task: J) -> str:
        key = self._keys.get(task)
        if key is None:
            key = self._keys[task] = self._counts_as(task.sender)
        return key

    def _sender(self, key: str) -> _Sender:
        state = self._senders.get(key)
        if state is None:
            state = self._senders[key] = _Sender(asyncio.Semaphore(self._slots_for(key)))
        return state

    def _left(self, task: J) -> None:
        """`task` is off the queue for good: it counts no more against its sender."""
        key = self._keys.pop(task, None) or self._counts_as(task.sender)
        state = self._senders.get(key)
        if state is None:
            return
        state.tasks -= 1
        if state.tasks <= 0 and not state.slots.locked():
            del self._senders[key]

    # -- running ---------------------------------------------------------------------------

    async def _take_slots(self, lane: _Lane[J]) -> J | None:
        """Slots for the lane's next task (its sender's, then a shared one), and the task;
        None when the lane emptied meanwhile. The head may be canceled while it waits: the
        slots then go to the one after it, or back."""
        while lane.waiting and not self._closing:
            head = lane.waiting[0]
            sender = self._sender(self._key(head))
            await sender.slots.acquire()
            if lane.waiting and lane.waiting[0] is head:
                await self._slots.acquire()
                if lane.waiting and lane.waiting[0] is head:
                    self._holding.add(head)
                    return lane.waiting.popleft()
                self._slots.release()
            sender.slots.release()
        return None

    async def _next(self, session_id: str, lane: _Lane[J]) -> J | None:
        if self.before_next is not None and lane.waiting and not self._closing:
            await _survive(self.before_next(session_id), "before a session's next task")
        if self.gather is not None and len(lane.waiting) > 1 and not self._closing:
            await _survive(self.gather(session_id, list(lane.waiting)), "gathering a queue")
        return await self._take_slots(lane)

    async def _drain(self, session_id: str, lane: _Lane[J]) -> None:
        try:
            while (task := await self._next(session_id, lane)) is not None:
                lane.current = task
                run = self._runs[task] = asyncio.create_task(self._run(task))
                try:
                    try:
                        await asyncio.shield(run)
                    except asyncio.CancelledError:
                        worker = asyncio.current_task()
                        if worker is not None and worker.cancelling():
                            raise  # shutdown, handled below
                        # cancel() reached the run before it began: nothing has recorded the
                        # end yet, so it is recorded here.
                        if not task.finished:
                            await self._canceled_before_start(task)
                    except Exception:
                        # The run records its own failures; one that escapes it (its end met
                        # an error while being recorded) leaves the task as a crash would,
                        # and must not take the tasks queued behind it down too.
                        log.exception("a task's run failed; the queue goes on")
                except asyncio.CancelledError:
                    # Shutdown: the task is interrupted, its journal kept for the next start.
                    if not run.done():
                        run.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await run
                    raise
                finally:
                    del self._runs[task]
                    self._release(task)
                    self._left(task)
                    lane.current = None
        finally:
            if not lane.waiting and self._lanes.get(session_id) is lane:
                del self._lanes[session_id]
        if self.on_idle is not None and not self._closing and session_id not in self._lanes:
            await _survive(self.on_idle(session_id), "letting an idle session go")


async def _survive(hook: Awaitable[None], what: str) -> None:
    """Run a hook whose failure must not end the session's worker: the tasks queued behind it
    would wait until the session's next message. The failure is logged; the queue goes on."""
    try:
        await hook
    except Exception:
        log.exception(f"{what} failed; the queue goes on")
