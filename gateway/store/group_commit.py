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
from sqlmodel import Session

from gateway.crash import NO_CRASH, CrashPoints
from gateway.store.batching import AfterCommit, BatchThread, Job

T = TypeVar("T")

MAX_BATCH = 64  # bounds how long the first caller of a batch waits for the others


class GroupCommitWriter(BatchThread):
    """The writer thread of one SQLite database."""

    def __init__(self, engine: Engine, *, crash: CrashPoints = NO_CRASH) -> None:
        self._engine = engine
        self.crash = crash
        self.batches = 0
        self.writes = 0
        # The file work that follows a commit (history.json lines) runs on a thread of its own,
        # so the next batch need not wait for it; its callers hear back once it is done.
        self._after = AfterCommit("agenvoy-db-after")
        super().__init__("agenvoy-db-write", MAX_BATCH)

    def close(self) -> None:
        super().close()
        self._after.close()

    async def run(
        self, work: Callable[[Session], T], after_commit: Callable[[T], None] | None = None
    ) -> T:
        """Run `work` in the next batch; returns once that batch is committed."""
        return await self.submit(work, after_commit)

    def handle(self, batch: list[Job[Any]]) -> list[Job[Any]]:
        pending = batch
        while pending:
            try:
                failed = self._attempt(pending)
            except Exception as exc:  # the begin or the commit failed: nothing stayed
                for job in pending:
                    job.error = exc
                return batch
            if failed is None:
                break
            # Rolled back: run the others again without the one that failed (a work may run
            # more than once). Savepoints would spare this, but cost more than the rare retry.
            pending = [job for job in pending if job is not failed]
        self.batches += 1
        self.writes += len(pending)
        followed = [job for job in pending if job.after is not None]
        self._after.pass_on(followed)
        return [job for job in batch if job.error is not None or job.after is None]

    def _attempt(self, jobs: list[Job[Any]]) -> Job[Any] | None:
        """Run `jobs` in one transaction and commit it; the first job that failed, if one did
        (then nothing is committed)."""
        with self._engine.connect() as conn:
            conn.begin()  # BEGIN IMMEDIATE (the engine's begin hook)
            # One session for the batch: the works' ORM objects are flushed after each, and the
            # transaction is the connection's to commit or roll back.
            with Session(bind=conn, join_transaction_mode="rollback_only") as session:
                for index, job in enumerate(jobs):
                    try:
                        job.result = job.call(session)
                        session.flush()
                    except Exception as exc:
                        job.error = exc
                        conn.rollback()
                        return job
                    if index == 0 and len(jobs) > 1:
                        self.crash.reach("mid_batch")
            conn.commit()
        return None
