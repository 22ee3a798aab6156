"""A thread that takes calls in batches: whatever queued up while it was busy is handled in one
go, and the event loop is woken once per batch rather than once per call.

Handing a small blocking call to a thread costs more than the call when it goes through a
thread pool: a pool's submit, a concurrent future and a wake-up of the loop each time. Here a
call is a queue entry and an asyncio future; the thread settles a whole batch's futures in one
callback on their loop. Calls run in the order they were queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gateway.threads import daemon_thread

T = TypeVar("T")


@dataclass(slots=True)
class Job(Generic[T]):
    call: Callable[..., T]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T]
    after: Callable[[T], None] | None = None
    lean: bool = False  # the call takes a `Lean` cursor rather than an ORM session
    before: Callable[[], None] | None = None  # run once before the call, on the same thread
    result: Any = None
    error: BaseException | None = field(default=None)


class BatchThread:
    """Subclasses say how a batch is handled (`handle`), setting each job's result or error."""

    def __init__(self, name: str, max_batch: int) -> None:
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[Job[Any] | None] = queue.SimpleQueue()
        self._closed = False
        self._in_hand = 0  # jobs in the batch being handled
        self._thread = daemon_thread(self._serve, name)
        self._thread.start()

    async def submit(
        self,
        call: Callable[..., T],
        after: Callable[[T], None] | None = None,
        *,
        lean: bool = False,
        before: Callable[[], None] | None = None,
    ) -> T:
        """Queue `call` and wait until its batch has been handled."""
        if self._closed:
            # Nobody would take it: fail now rather than wait for ever.
            raise RuntimeError(f"{self._thread.name} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(Job(call, loop, future, after, lean, before=before))
        return await future

    def close(self) -> None:
        """Finish what is queued, then stop the thread (blocking: call it from a thread)."""
        self._closed = True
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def waiting(self) -> bool:
        """Asked from a work of the batch in hand: whether other work waits for it to end,
        in that batch (answered at its end too) or queued behind it."""
        return self._in_hand > 1 or not self._queue.empty()

    def pass_on(self, jobs: list[Job[Any]]) -> None:
        """Queue jobs another batch thread took in (it leaves answering them to this one)."""
        for job in jobs:
            self._queue.put(job)

    def handle(self, batch: list[Job[Any]]) -> list[Job[Any]]:
        """Handle a batch; returns the jobs to answer now (the others were passed on)."""
        raise NotImplementedError

    def _serve(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            batch: list[Job[Any]] = [first]
            while len(batch) < self.max_batch:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stopping = True
                    break
                batch.append(job)
            self._in_hand = len(batch)
            answer(self.handle(batch))


class SerialCalls(BatchThread):
    """Plain blocking calls (small file writes), one after another on one thread."""

    def __init__(self, name: str) -> None:
        super().__init__(name, max_batch=256)

    def handle(self, batch: list[Job[Any]]) -> list[Job[Any]]:
        for job in batch:
            try:
                job.result = job.call()
            except Exception as exc:
                job.error = exc
        return batch


class AfterCommit(BatchThread):
    """Runs the `after` of jobs whose work another thread committed, then answers them."""

    def __init__(self, name: str) -> None:
        self._outstanding = 0  # jobs passed on and not yet followed up
        self._counting = threading.Lock()
        super().__init__(name, max_batch=256)

    def pass_on(self, jobs: list[Job[Any]]) -> None:
        with self._counting:
            self._outstanding += len(jobs)
        super().pass_on(jobs)

    def idle(self) -> bool:
        """Whether every job passed on has been followed up. Only the thread that passes jobs
        on can make it busy again, so for that thread a yes holds until it passes more."""
        return self._outstanding == 0

    def handle(self, batch: list[Job[Any]]) -> list[Job[Any]]:
        follow_up(batch)
        with self._counting:
            self._outstanding -= len(batch)
        return batch


def follow_up(jobs: list[Job[Any]]) -> None:
    """Run the `after` of committed jobs, in order; one that fails fails only its job."""
    for job in jobs:
        assert job.after is not None
        try:
            job.after(job.result)
        except Exception as exc:
            job.error = exc


def answer(batch: list[Job[Any]]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[Job[Any]]] = {}
    for job in batch:
        by_loop.setdefault(job.loop, []).append(job)
    for loop, jobs in by_loop.items():
        # A closed loop has nobody waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, jobs)


def _settle(jobs: list[Job[Any]]) -> None:
    for job in jobs:
        if job.future.cancelled():
            continue
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.result)
