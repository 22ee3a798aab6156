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

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import Connection
from sqlalchemy.orm.session import JoinTransactionMode
from sqlmodel import Session

from gateway.crash import NO_CRASH, CrashPoints
from gateway.store.batching import BatchThread, Job

T = TypeVar("T")

MAX_BATCH = 64  # bounds how long the first caller of a batch waits for the others


class GroupCommitWriter(BatchThread):
    """The writer thread of one SQLite database."""

    def __init__(self, engine: Engine, *, crash: CrashPoints = NO_CRASH) -> None:
        self._engine = engine
        self.crash = crash
        self.batches = 0
        self.writes = 0
        super().__init__("agenvoy-db-write", MAX_BATCH)

    async def run(
        self, work: Callable[[Session], T], after_commit: Callable[[T], None] | None = None
    ) -> T:
        """Run `work` in the next batch; returns once that batch is committed."""
        return await self.submit(work, after_commit)

    def handle(self, batch: list[Job[Any]]) -> None:
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
            if job.error is None and job.after is not None:
                try:
                    job.after(job.result)
                except Exception as exc:
                    job.error = exc

    @staticmethod
    def _run_one(conn: Connection, job: Job[Any], *, alone: bool) -> None:
        # Alone in its batch a work needs no savepoint: its failure rolls the whole
        # transaction back. Otherwise the savepoint keeps the others' work when it fails.
        mode: JoinTransactionMode = "rollback_only" if alone else "create_savepoint"
        try:
            with Session(bind=conn, join_transaction_mode=mode, expire_on_commit=False) as session:
                job.result = job.call(session)
                session.commit()
        except Exception as exc:
            job.error = exc
