"""Group commit for SQLite: one writer thread, one transaction for the writes that arrive together.

SQLite has one writer per file, so every write of the process goes to a single thread. That
thread takes whatever has queued up while it was busy and runs it as one batch: one
`BEGIN IMMEDIATE`, each caller's work in a savepoint of its own (a failing work is rolled back
alone and fails only its caller), one `COMMIT`. Callers hear back only after that commit, so an
acknowledged write is as durable as before; under load the fixed cost of a transaction — the
begin, the commit, the WAL frame header, the thread hand-off and the wake-up of the event loop —
is paid once per batch instead of once per write. A process killed in the middle of a batch
leaves none of it behind, and none of its callers was answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import Connection
from sqlalchemy.orm.session import JoinTransactionMode
from sqlmodel import Session

from gateway.crash import NO_CRASH, CrashPoints

T = TypeVar("T")

MAX_BATCH = 64  # bounds how long the first caller of a batch waits for the others


@dataclass(slots=True)
class _Job(Generic[T]):
    work: Callable[[Session], T]
    after_commit: Callable[[T], None] | None
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T]
    result: Any = None
    error: BaseException | None = field(default=None)


class GroupCommitWriter:
    """The writer thread of one SQLite database."""

    def __init__(self, engine: Engine, *, crash: CrashPoints = NO_CRASH) -> None:
        self._engine = engine
        self.crash = crash
        self._queue: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="agenvoy-db-write", daemon=True)
        self._thread.start()
        self.batches = 0
        self.writes = 0

    async def run(
        self, work: Callable[[Session], T], after_commit: Callable[[T], None] | None = None
    ) -> T:
        """Run `work` in the next batch; returns once that batch is committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Job(work, after_commit, loop, future))
        return await future

    def close(self) -> None:
        """Finish what is queued, then stop the thread (blocking: call it from a thread)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    # -- the writer thread -----------------------------------------------------------------

    def _serve(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            batch: list[_Job[Any]] = [first]
            while len(batch) < MAX_BATCH:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stopping = True
                    break
                batch.append(job)
            self._commit(batch)
            self._answer(batch)

    def _commit(self, batch: list[_Job[Any]]) -> None:
        try:
            with self._engine.connect() as conn:
                conn.begin()  # BEGIN IMMEDIATE (the engine's begin hook)
                for index, job in enumerate(batch):
                    self._run_one(conn, job, alone=len(batch) == 1)
                    if index == 0 and len(batch) > 1:
                        self.crash.reach("mid_batch")
                if len(batch) == 1 and batch[0].error is not None:
                    conn.rollback()
                    return
                conn.commit()
        except Exception as exc:  # the begin or the commit failed: nothing of the batch stayed
            for job in batch:
                if job.error is None:
                    job.error = exc
            return
        self.batches += 1
        self.writes += len(batch)
        for job in batch:
            if job.error is None and job.after_commit is not None:
                try:
                    job.after_commit(job.result)
                except Exception as exc:
                    job.error = exc

    @staticmethod
    def _run_one(conn: Connection, job: _Job[Any], *, alone: bool) -> None:
        # Alone in its batch a work needs no savepoint: its failure rolls the whole
        # transaction back. Otherwise the savepoint keeps the others' work when it fails.
        mode: JoinTransactionMode = "rollback_only" if alone else "create_savepoint"
        try:
            with Session(bind=conn, join_transaction_mode=mode, expire_on_commit=False) as session:
                job.result = job.work(session)
                session.commit()
        except Exception as exc:
            job.error = exc

    @staticmethod
    def _answer(batch: list[_Job[Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Job[Any]]] = {}
        for job in batch:
            by_loop.setdefault(job.loop, []).append(job)
        for loop, jobs in by_loop.items():
            # A closed loop has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, jobs)


def _settle(jobs: list[_Job[Any]]) -> None:
    for job in jobs:
        if job.future.cancelled():
            continue
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.result)
