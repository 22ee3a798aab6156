"""The SQL engine: SQLite (WAL) by default, PostgreSQL when the URL says so.

Work is written once, as a plain function of a SQLModel `Session`, and run the way each backend
is fastest without blocking the event loop:

- SQLite: on a thread of the database's own, with the standard `sqlite3` driver. A whole
  transaction is one hand-off to that thread; an async driver would hand off every statement,
  cursor and fetch, which measured about ten times slower per message.
- PostgreSQL: through the asyncpg engine with `run_sync`, which keeps the same function; the
  lean statements every message makes run straight on asyncpg connections
  (`gateway.store.pg_lean`).

SQLite allows one writer at a time per file. Inside a process every write goes to a single
writer thread, which commits the writes that arrive together as one transaction
(`gateway.store.group_commit`), each caller answered once its batch is committed. A transaction
starts with `BEGIN IMMEDIATE`, so it takes the write lock up front (a deferred
transaction that tries to upgrade later can fail at once, whatever the busy timeout). Across
processes the busy timeout waits for the other writer, and a write that still finds the database
locked is retried, so "database is locked" never reaches a user.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlmodel import Session
from sqlmodel.ext.asyncio.session import AsyncSession

from gateway.crash import NO_CRASH, CrashPoints
from gateway.logs import get_logger
from gateway.store.batching import SerialCalls
from gateway.store.checkpoints import WAL_KEEP_BYTES, WRITER_AUTOCHECKPOINT, Checkpointer
from gateway.store.errors import DatabaseUnavailable, OutcomeUnknown
from gateway.store.group_commit import GroupCommitWriter
from gateway.store.lean import Lean, Row
from gateway.store.pg_lean import PgLeanPool
from gateway.store.readers import LeanReads, ReaderThreads
from gateway.store.schema import migrate_postgresql, migrate_sqlite, revision_of
from gateway.store.space import Space
from gateway.store.sqlite_setup import is_locked, sqlite_engine, while_locked

log = get_logger(__name__)

T = TypeVar("T")
U = TypeVar("U")
Work = Callable[[Session], T]

SQLITE_READERS = 4
# Connections per instance for the sessions that run at once: the lean pool takes the statements
# every message makes, SQLAlchemy's the rest (with overflow for a burst of ORM work).
PG_POOL_SIZE = 20
PG_ORM_POOL_SIZE = 10


class DatabaseError(RuntimeError):
    """The database cannot be opened or migrated; the message says why."""


class Database:
    def __init__(self, url: str, *, crash: CrashPoints = NO_CRASH) -> None:
        """`crash`: where a crash test may stop the process in the middle of a group commit."""
        self.url = url
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        self.sqlite_path: Path | None = None
        # Whether writes fail for lack of space now (/healthz).
        self.space = Space(server_archive=self.dialect != "sqlite")
        self._async_engine: AsyncEngine | None = None
        self._pg_lean: PgLeanPool | None = None
        self._files: SerialCalls | None = None
        self.checkpoints: Checkpointer | None = None  # SQLite's WAL checkpoints
        if self.dialect == "sqlite":
            if not parsed.database or parsed.database == ":memory:":
                raise DatabaseError("an in-memory SQLite database cannot be shared; use a file")
            self.sqlite_path = Path(parsed.database).expanduser().resolve()
            self.sqlite_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.space.probe(self.sqlite_path.parent)
            sync_url = f"sqlite:///{self.sqlite_path}"
            # Two connections: the group writer's, held for its life, and the migrations'.
            # Their checkpoints are the checkpointer's (gateway/store/checkpoints.py).
            self._writer = sqlite_engine(
                sync_url,
                begin="BEGIN IMMEDIATE",
                pool_size=2,
                also=[
                    f"PRAGMA wal_autocheckpoint={WRITER_AUTOCHECKPOINT}",
                    f"PRAGMA journal_size_limit={WAL_KEEP_BYTES}",
                ],
            )
            # A connection for each reader thread and one for the lean reads' thread.
            self._reader = sqlite_engine(sync_url, begin="BEGIN", pool_size=SQLITE_READERS + 1)
            checkpoints = self.checkpoints = Checkpointer(self.sqlite_path)
            self._group = GroupCommitWriter(
                self._writer, crash=crash, committed=checkpoints.committed
            )
            self._readers = ReaderThreads(self._reader, SQLITE_READERS, "agenvoy-db-read")
            self._lean_reads = LeanReads(self._reader, "agenvoy-db-read-lean")
        elif self.dialect == "postgresql":
            if parsed.drivername in ("postgresql", "postgres"):
                parsed = parsed.set(drivername="postgresql+asyncpg")
            # Enough connections for the sessions that run at once: past the pool, every
            # checkout opened a new server backend (and lost its prepared statements).
            self._async_engine = create_async_engine(
                parsed,
                pool_pre_ping=True,
                pool_size=PG_ORM_POOL_SIZE,
                max_overflow=PG_ORM_POOL_SIZE,
            )
            dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
            self._pg_lean = PgLeanPool(dsn, PG_POOL_SIZE)
            # The file work that goes with the archive's (history.json lines, the recent lines a
            # task's context reads): on SQLite it rides on the database's own threads.
            self._files = SerialCalls("agenvoy-db-files")
        else:
            raise DatabaseError(
                f"unsupported database {self.dialect!r}: use sqlite:///path/history.db "
                "or postgresql://user:password@host/db"
            )

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    async def open(
        cls, url: str, *, migrate: bool = True, crash: CrashPoints = NO_CRASH
    ) -> Database:
        db = cls(url, crash=crash)
        if migrate:
            try:
                await db.migrate()
            except BaseException:
                await db.close()
                raise
        return db

    async def close(self) -> None:
        if self._async_engine is not None:
            assert self._pg_lean is not None
            await self._pg_lean.close()
            await self._async_engine.dispose()
            if self._files is not None:
                await asyncio.to_thread(self._files.close)
            return
        await asyncio.to_thread(self._group.close)
        if self.checkpoints is not None:
            await asyncio.to_thread(self.checkpoints.close)
        await asyncio.to_thread(self._readers.close)
        await asyncio.to_thread(self._lean_reads.close)
        self._writer.dispose()
        self._reader.dispose()

    async def migrate(self, revision: str = "head") -> None:
        """Bring the schema to `revision`. Safe to run by several processes at once."""
        if self._async_engine is None:
            assert self.sqlite_path is not None
            await migrate_sqlite(self._writer, self.sqlite_path, revision)
        else:
            await migrate_postgresql(self._async_engine, revision)
        log.debug("database migrated", dialect=self.dialect, revision=revision)

    async def ping(self) -> None:
        """One trivial query; raises unless the database answers (a readiness check)."""
        await self.read(_select_one)

    async def current_revision(self) -> str | None:
        return await self.read(revision_of)

    # -- running work ----------------------------------------------------------------------

    async def write(self, work: Work[T], *, after_commit: Callable[[T], None] | None = None) -> T:
        """Run `work` in one write transaction, committed on return, retried while locked.

        `work` may run more than once, so it must not have side effects outside the session.
        `after_commit` runs once, off the event loop, after the commit succeeded; on SQLite it
        shares the writer thread's hand-off, which is most of the cost of a small write.
        """
        return await self._write(work, after_commit, lean=False)

    async def write_lean(
        self,
        work: Callable[[Lean], T],
        *,
        after_commit: Callable[[T], None] | None = None,
        before: Callable[[], None] | None = None,
    ) -> T:
        """`write` for statements of `gateway.store.lean`: on SQLite no ORM session or
        SQLAlchemy transaction is built around them, for the writes every message makes.

        `before` is a blocking call (a file write) that must be done before the work may be
        committed; on SQLite it runs in the writer thread's hand-off, before the transaction
        begins, on PostgreSQL on the files thread first. When it raises, nothing is written.
        A write retried runs it again: it must be safe to call more than once."""
        return await self._write(work, after_commit, lean=True, before=before)

    async def _write(
        self,
        work: Callable[[Any], T],
        after_commit: Callable[[T], None] | None,
        *,
        lean: bool,
        before: Callable[[], None] | None = None,
    ) -> T:
        try:
            return await self._write_once(work, after_commit, lean, before)
        except (OperationalError, sqlite3.OperationalError) as exc:
            if not is_locked(exc):
                raise
        # Only a write that met another process's lock pays for the retry machinery.
        async for attempt in while_locked():
            with attempt:
                return await self._write_once(work, after_commit, lean, before)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write_once(
        self,
        work: Callable[[Any], T],
        after_commit: Callable[[T], None] | None,
        lean: bool,
        before: Callable[[], None] | None = None,
    ) -> T:
        with self.space.watching():  # a write that fails for lack of space: StorageFull
            if self._async_engine is None:
                return await self._group.run(work, after_commit, lean=lean, before=before)
            if before is not None:
                await self.beside(before)
            if lean:
                assert self._pg_lean is not None
                result = await self._pg_lean.write(work)
            else:
                result = await self._async_work(work, commit=True)
            if after_commit is not None:
                await self.beside(partial(after_commit, result))
            return result

    async def write_one(
        self,
        statement: str,
        *params: Any,
        repeatable: bool,
        after_commit: Callable[[list[Row]], None] | None = None,
        before: Callable[[], None] | None = None,
    ) -> list[Row]:
        """One lean statement committed on its own; its rows. On PostgreSQL that is a single
        round trip (no BEGIN or COMMIT around it), for work written as one statement there (a
        data-modifying WITH). `repeatable`: running it twice does what running it once does,
        so a connection that ended under it may run it again (else `OutcomeUnknown`).
        `before` as for `write_lean`."""
        if self._async_engine is None:
            return await self.write_lean(
                lambda sql: sql.all(statement, *params), after_commit=after_commit, before=before
            )
        assert self._pg_lean is not None
        with self.space.watching():
            if before is not None:
                await self.beside(before)
            rows = await self._pg_lean.write_one(statement, params, repeatable=repeatable)
            if after_commit is not None:
                await self.beside(partial(after_commit, rows))
        return rows

    def writes_waiting(self) -> bool:
        """Whether writes wait for the one running now (a long write may then end sooner).
        Only SQLite's writes wait for each other; PostgreSQL's lock only the rows they touch."""
        return self._async_engine is None and self._group.waiting()

    async def read(self, work: Work[T]) -> T:
        return await self._read(work, lean=False)

    async def read_lean(self, work: Callable[[Lean], T], *, long: bool = False) -> T:
        """`read` for statements of `gateway.store.lean`: no ORM session and no SQLAlchemy
        connection around them, for the reads every message makes. `long`: a read of many rows
        (a background job's); on SQLite it runs on a reader thread of its own, so the short
        reads of requests, batched together, do not wait behind it."""
        if long and self._async_engine is None:
            return await self._read(partial(_lean_in_snapshot, work), lean=False)
        return await self._read(work, lean=True)

    async def read_lean_beside(
        self, work: Callable[[Lean], T], beside: Callable[[], U]
    ) -> tuple[T, U]:
        """`read_lean`, and `beside` (a blocking read of files) with it: in the same hand-off
        to a reader thread on SQLite, on a thread next to the read on PostgreSQL."""
        if self._async_engine is None:
            return await self.read_lean(lambda sql: (work(sql), beside()))
        done, found = await asyncio.gather(self.read_lean(work), self.beside(beside))
        return done, found

    async def beside(self, call: Callable[[], U]) -> U:
        """A blocking file call that goes with the archive's work, off the event loop. On
        PostgreSQL one thread takes them, in the order given and in batches: handing a small
        call to the default thread pool costs more than the call (a pool's submit, a
        concurrent future and a wake-up of the loop for each), and every message made four."""
        if self._files is None:
            return await asyncio.to_thread(call)
        return await self._files.submit(call)

    async def _read(self, work: Callable[[Any], T], *, lean: bool) -> T:
        try:
            return await self._read_once(work, lean)
        except (OperationalError, sqlite3.OperationalError) as exc:
            if not is_locked(exc):
                raise
        async for attempt in while_locked():
            with attempt:
                return await self._read_once(work, lean)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read_once(self, work: Callable[[Any], T], lean: bool) -> T:
        if self._async_engine is None:
            if lean:
                return await self._lean_reads.run(work)
            return await self._readers.run(partial(_read_in_session, work))
        if lean:
            assert self._pg_lean is not None
            return await self._pg_lean.read(work)
        return await self._async_work(work, commit=False)

    async def _async_work(self, work: Work[T], *, commit: bool) -> T:
        assert self._async_engine is not None
        async with AsyncSession(self._async_engine, expire_on_commit=False) as session:
            # Failing before the commit, nothing of the work is kept: a connection that cannot
            # be had (refused, none free, the database gone) or that ends under the work is
            # the database's absence, as the lean pool reports it. A COMMIT cut on its way
            # may have landed: that one is `OutcomeUnknown`, never retold.
            try:
                await session.connection()
            except (OSError, SQLAlchemyTimeoutError, DBAPIError) as exc:
                raise DatabaseUnavailable(f"the database cannot be reached: {exc!r}") from exc
            try:
                # sqlmodel's AsyncSession hands run_sync its own sqlmodel Session.
                result = await session.run_sync(work)  # type: ignore[arg-type]
            except (OSError, DBAPIError) as exc:
                if isinstance(exc, DBAPIError) and not exc.connection_invalidated:
                    raise
                raise DatabaseUnavailable(f"the database ended the connection: {exc!r}") from exc
            if commit:
                try:
                    await session.commit()
                except (OSError, DBAPIError) as exc:
                    if isinstance(exc, DBAPIError) and not exc.connection_invalidated:
                        raise
                    raise OutcomeUnknown(f"the connection ended during a COMMIT: {exc!r}") from exc
            return result


async def migrated_revision(url: str) -> str | None:
    """Open the database at `url`, bring its schema up to date, and name the revision it is
    at: what `agenvoy doctor` checks."""
    db = await Database.open(url)
    try:
        return await db.current_revision()
    finally:
        await db.close()


@functools.cache
def insert_ignoring(dialect: str, model: type[Any]) -> Any:
    """INSERT … ON CONFLICT DO NOTHING in the database's dialect; `.values()` to be added, or
    the values given when it is executed (cheaper: the statement is built once)."""
    insert = sqlite_insert if dialect == "sqlite" else pg_insert
    return insert(model).on_conflict_do_nothing()


def _read_in_session(work: Work[T], conn: Connection) -> T:
    with Session(bind=conn) as session:  # begun on first use, rolled back on close
        return work(session)


def _lean_in_snapshot(work: Callable[[Lean], T], session: Session) -> T:
    driver = session.connection().connection.dbapi_connection
    assert driver is not None
    return work(Lean(driver, "sqlite"))


def _select_one(session: Session) -> None:
    session.connection().exec_driver_sql("SELECT 1").scalar_one()
