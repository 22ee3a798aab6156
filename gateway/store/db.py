"""The SQL engine: SQLite (WAL) by default, PostgreSQL when the URL says so.

SQLite allows one writer at a time per database file. Inside a process every write goes
through one connection behind one lock, and starts with `BEGIN IMMEDIATE` so it takes the write
lock up front (a deferred transaction that tries to upgrade later can fail at once, whatever the
busy timeout). Across processes the busy timeout waits for the other writer, and a write that
still finds the database locked is retried, so "database is locked" never reaches a user.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

from gateway.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T")

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 5000
# Advisory-lock key shared by every instance migrating one PostgreSQL database.
_PG_MIGRATION_LOCK = 0x616765_6E766F79


class DatabaseError(RuntimeError):
    """The database cannot be opened or migrated; the message says why."""


def _is_locked(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError) and (
        "locked" in str(exc).lower() or "busy" in str(exc).lower()
    )


def sqlite_pragmas() -> list[str]:
    """The connection settings of every SQLite connection (the benchmark floor uses them too)."""
    return [
        "PRAGMA journal_mode=WAL",
        "PRAGMA synchronous=NORMAL",
        f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
        "PRAGMA foreign_keys=ON",
    ]


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        self.sqlite_path: Path | None = None
        if self.dialect == "sqlite":
            if not parsed.database or parsed.database == ":memory:":
                raise DatabaseError("an in-memory SQLite database cannot be shared; use a file")
            self.sqlite_path = Path(parsed.database)
            self.sqlite_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._writer = self._sqlite_engine(url, begin="BEGIN IMMEDIATE", pool_size=1)
            self._reader = self._sqlite_engine(url, begin="BEGIN", pool_size=4)
        elif self.dialect == "postgresql":
            if parsed.drivername == "postgresql":
                url = str(parsed.set(drivername="postgresql+asyncpg").render_as_string(False))
            engine = create_async_engine(url, pool_pre_ping=True)
            self._writer = self._reader = engine
        else:
            raise DatabaseError(
                f"unsupported database {self.dialect!r}: use sqlite+aiosqlite:///path "
                "or postgresql://user@host/db"
            )
        self._write_lock = asyncio.Lock()

    @staticmethod
    def _sqlite_engine(url: str, *, begin: str, pool_size: int) -> AsyncEngine:
        engine = create_async_engine(url, pool_size=pool_size, max_overflow=0)

        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Let SQLAlchemy's begin event decide how transactions start (pysqlite would
            # otherwise open them lazily and deferred).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            for pragma in sqlite_pragmas():
                cursor.execute(pragma)
            cursor.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql(begin)

        return engine

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    async def open(cls, url: str, *, migrate: bool = True) -> Database:
        db = cls(url)
        if migrate:
            try:
                await db.migrate()
            except BaseException:
                await db.close()
                raise
        return db

    async def close(self) -> None:
        await self._writer.dispose()
        if self._reader is not self._writer:
            await self._reader.dispose()

    async def migrate(self, revision: str = "head") -> None:
        """Bring the schema to `revision`. Safe to run by several processes at once."""
        async with self._migration_lock(), self._writer.connect() as conn:
            if self.dialect == "postgresql":
                await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
            try:
                await conn.run_sync(_upgrade, revision)
                await conn.commit()
            finally:
                if self.dialect == "postgresql":
                    await conn.execute(
                        text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_MIGRATION_LOCK}
                    )
                    await conn.commit()
        log.debug("database migrated", dialect=self.dialect, revision=revision)

    async def current_revision(self) -> str | None:
        async with self._reader.connect() as conn:
            return await conn.run_sync(_current_revision)

    @contextlib.asynccontextmanager
    async def _migration_lock(self) -> AsyncIterator[None]:
        if self.sqlite_path is None:
            yield
            return
        # The database's folder is the lock: no extra file, and it covers the WAL files too.
        fd = os.open(self.sqlite_path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- sessions --------------------------------------------------------------------------

    async def write(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        """Run `work` in one write transaction, committed on return, retried while locked.

        `work` may run more than once, so it must not have side effects outside the session.
        """
        async for attempt in _while_locked():
            with attempt:
                async with (
                    self._write_lock,
                    AsyncSession(self._writer, expire_on_commit=False) as session,
                ):
                    result = await work(session)
                    await session.commit()
                    return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def read(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        async for attempt in _while_locked():
            with attempt:
                async with AsyncSession(self._reader, expire_on_commit=False) as session:
                    return await work(session)
        raise AssertionError("unreachable")  # pragma: no cover


def _while_locked() -> AsyncRetrying:
    # Past the busy timeout, a write that still meets another process's lock waits and tries
    # again rather than failing the user's message.
    return AsyncRetrying(
        retry=retry_if_exception(_is_locked),
        wait=wait_exponential_jitter(multiplier=0.05, max=1.0),
        stop=stop_after_delay(60),
        reraise=True,
    )


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def _upgrade(connection: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _current_revision(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()
