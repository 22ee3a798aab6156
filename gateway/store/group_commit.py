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
from sqlmodel import Session

from gateway.crash import NO_CRASH, CrashPoints
from gateway.store.batching import AfterCommit, BatchThread, Job, follow_up
from gateway.store.lean import Lean

T = TypeVar("T")

MAX_BATCH = 64  # bounds how long the first caller of a batch waits for the others


class GroupCommitWriter(BatchThread):
    """The writer thread of one SQLite database."""

    def __init__(
        self,
        engine: Engine,
        *,
        crash: CrashPoints = NO_CRASH,
        committed: Callable[[], None] | None = None,
    ) -> None:
        """`committed` is told after each commit, on this thread (the checkpointer's cue)."""
        self._engine = engine
        self._committed = committed
        self._conn: Connection | None = None
        self.crash = crash
        self.batches = 0
        self.writes = 0
        # The file work that follows a commit (history.json lines) runs on a thread of its own
        # when writes wait, so the next batch need not wait for it; its callers hear back once
        # it is done. With none waiting it runs here: a hand-off less on the caller's path.
        self._after = AfterCommit("agenvoy-db-after")
        super().__init__("agenvoy-db-write", MAX_BATCH)

    def close(self) -> None:
        super().close()
        self._after.close()
        if self._conn is not None:
            self._conn.close()

    async def run(
        self,
        work: Callable[[Session], T] | Callable[[Lean], T],
        after_commit: Callable[[T], None] | None = None,
        *,
        lean: bool = False,
        before: Callable[[], None] | None = None,
    ) -> T:
        """Run `work` in the next batch; returns once that batch is committed. A `lean` work
        is given the driver's cursor (`gateway.store.lean`) instead of an ORM session.
        `before` runs on this thread before the batch's transaction begins; when it raises,
        `work` does not run and the caller gets its error."""
        return await self.submit(work, after_commit, lean=lean, before=before)

    def handle(self, batch: list[Job[Any]]) -> list[Job[Any]]:
        pending = []
        for job in batch:
            if job.before is not None:
                try:
                    job.before()
                except Exception as exc:
                    job.error = exc
                    continue
            pending.append(job)
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
        if self._committed is not None and pending:
            self._committed()
        followed = [job for job in pending if job.after is not None]
        if followed and self._queue.empty() and self._after.idle():
            follow_up(followed)  # none outstanding there: still in the order of the commits
            return batch
        self._after.pass_on(followed)
        return [job for job in batch if job.error is not None or job.after is None]

    def _connection(self) -> Connection:
        # One connection for the thread's life: a pool checkout per batch showed in profiles.
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._conn = self._engine.connect()
        return self._conn

    def _attempt(self, jobs: list[Job[Any]]) -> Job[Any] | None:
        """Run `jobs` in one transaction and commit it; the first job that failed, if one did
        (then nothing is committed)."""
        conn = self._connection()
        driver = conn.connection.dbapi_connection
        assert driver is not None
        # The transaction is begun on the driver: a batch of lean works never builds
        # SQLAlchemy's transaction and session objects; the first ORM work joins it.
        driver.execute("BEGIN IMMEDIATE")
        session: Session | None = None
        try:
            for index, job in enumerate(jobs):
                try:
                    if job.lean:
                        job.result = job.call(Lean(driver, "sqlite"))
                    else:
                        if session is None:
                            conn.begin()  # SQLAlchemy's view of the transaction begun above
                            session = Session(bind=conn, join_transaction_mode="rollback_only")
                        job.result = job.call(session)
                        session.flush()
                except Exception as exc:
                    job.error = exc
                    self._rollback(conn, driver)
                    return job
                if index == 0 and len(jobs) > 1:
                    self.crash.reach("mid_batch")
            if conn.in_transaction():
                conn.commit()
            else:
                driver.commit()
        except BaseException:
            self._rollback(conn, driver)
            raise
        finally:
            if session is not None:
                session.close()
        return None

    def _rollback(self, conn: Connection, driver: Any) -> None:
        try:
            if conn.in_transaction():
                conn.rollback()
            elif driver.in_transaction:
                driver.rollback()
        except Exception:
            # A connection that cannot even roll back is not used again.
            conn.invalidate()
