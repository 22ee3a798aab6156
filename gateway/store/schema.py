"""The archive's schema: alembic's migrations brought to a revision (head at every start), by
one process at a time, and the revision an archive is at."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
from collections.abc import AsyncIterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import Session

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Advisory-lock key shared by every instance migrating one PostgreSQL database.
_PG_MIGRATION_LOCK = 0x616765_6E766F79


async def migrate_sqlite(engine: Engine, path: Path, revision: str) -> None:
    async with _folder_lock(path.parent):
        await asyncio.to_thread(_migrate_sqlite, engine, revision)


async def migrate_postgresql(engine: AsyncEngine, revision: str) -> None:
    async with engine.connect() as conn:
        lock = {"k": _PG_MIGRATION_LOCK}
        await conn.execute(text("SELECT pg_advisory_lock(:k)"), lock)
        try:
            await conn.run_sync(_upgrade, revision)
            await conn.commit()
        finally:
            await conn.execute(text("SELECT pg_advisory_unlock(:k)"), lock)
            await conn.commit()


def revision_of(session: Session) -> str | None:
    return MigrationContext.configure(session.connection()).get_current_revision()


@contextlib.asynccontextmanager
async def _folder_lock(folder: Path) -> AsyncIterator[None]:
    # The database's folder is the lock: no extra file, and it covers the WAL files too.
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


@functools.cache
def _head_revision() -> str | None:
    """The newest migration's revision: read from the scripts once per process."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _upgrade(connection: Connection, revision: str) -> None:
    # A schema already at head is the common case of every open after the first: asking the
    # version table is one query, where the upgrade command loads every migration script.
    if revision == "head":
        at = MigrationContext.configure(connection).get_current_revision()
        if at is not None and at == _head_revision():
            return
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _migrate_sqlite(engine: Engine, revision: str) -> None:
    with engine.connect() as connection:
        _upgrade(connection, revision)
        connection.commit()
