"""The archive's schema: alembic's migrations brought to a revision (head at every start), by
one process at a time, and the revision an archive is at.

Alembic is loaded only to migrate: an archive already at `HEAD_REVISION`, as at every start
after the first, is found so with one query, without loading alembic or the migration scripts.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sqlalchemy import Engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import Session

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# The newest migration's revision: tests/test_schema.py holds it to alembic's own reading
# of the scripts, so a migration added without moving it here fails there.
HEAD_REVISION: Final = "0026"
# Where alembic keeps an archive's revision.
_VERSION_TABLE = "alembic_version"
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
    return _revision_at(session.connection())


def _revision_at(connection: Connection) -> str | None:
    """The archive's revision (None: not migrated yet), as alembic records it."""
    if not connection.dialect.has_table(connection, _VERSION_TABLE):
        return None
    return connection.execute(text(f"SELECT version_num FROM {_VERSION_TABLE}")).scalar()


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
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def _upgrade(connection: Connection, revision: str) -> None:
    # A schema already at head is the common case of every open after the first: asking the
    # version table is one query, where the upgrade command loads alembic and every script.
    if revision in ("head", HEAD_REVISION) and _revision_at(connection) == HEAD_REVISION:
        return
    from alembic import command

    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _migrate_sqlite(engine: Engine, revision: str) -> None:
    with engine.connect() as connection:
        _upgrade(connection, revision)
        connection.commit()
