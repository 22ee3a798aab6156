from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from sqlalchemy import inspect
from sqlmodel import Session, SQLModel
from support import head_revision

from gateway.store.db import Database
from gateway.store.models import PER_SESSION_TABLES
from gateway.store.schema import HEAD_REVISION

TABLES = [
    "session",
    "messages",
    "action_history",
    "file_history",
    "usage",
    "outbox",
    "schedule",
    "embedding",
    "embedding_cursor",
    "member_memory",
    "knowledge_document",
    "knowledge_chunk",
    "platform_connection",
]


async def test_models_match_the_migrated_schema(database_url: str) -> None:
    db = await Database.open(database_url)
    try:

        def columns(session: Session) -> dict[str, set[str]]:
            inspector = inspect(session.connection())
            return {t: {c["name"] for c in inspector.get_columns(t)} for t in TABLES}

        in_db = await db.read(columns)
    finally:
        await db.close()
    for table in TABLES:
        in_model = set(SQLModel.metadata.tables[table].columns.keys())
        assert in_model == in_db[table], table


async def test_per_session_tables_are_every_table_with_a_session_id(database_url: str) -> None:
    db = await Database.open(database_url)
    try:

        def with_session_id(session: Session) -> set[str]:
            inspector = inspect(session.connection())
            return {
                table
                for table in inspector.get_table_names()
                if any(c["name"] == "session_id" for c in inspector.get_columns(table))
            }

        in_db = await db.read(with_session_id)
    finally:
        await db.close()
    assert in_db == {table.name for table in PER_SESSION_TABLES}
    assert in_db >= {"messages", "action_history", "file_history", "usage", "outbox"}


async def test_every_per_session_table_has_an_index_leading_with_session_id(
    database_url: str,
) -> None:
    """Deleting or renaming a session touches every per-session table by `session_id`: none
    may need a scan of the whole table for it."""
    db = await Database.open(database_url)
    try:

        def leading(session: Session) -> dict[str, set[str]]:
            inspector = inspect(session.connection())
            found: dict[str, set[str]] = {}
            for table in PER_SESSION_TABLES:
                firsts = {str(i["column_names"][0]) for i in inspector.get_indexes(table.name)}
                unique = inspector.get_unique_constraints(table.name)
                firsts |= {str(u["column_names"][0]) for u in unique}
                primary = inspector.get_pk_constraint(table.name)["constrained_columns"]
                firsts |= set(primary[:1])
                found[table.name] = firsts
            return found

        firsts = await db.read(leading)
    finally:
        await db.close()
    assert {t for t, cols in firsts.items() if "session_id" not in cols} == set()


@pytest.mark.parametrize("url", ["sqlite:///relative.db", "sqlite+aiosqlite:///x.db"])
async def test_sqlite_urls_of_either_driver_are_accepted(url: str, tmp_path: Path) -> None:
    db = await Database.open(url.replace(":///", f":///{tmp_path}/"))
    try:
        assert db.dialect == "sqlite"
        assert db.sqlite_path == tmp_path / url.rsplit("/", 1)[1]
        assert await db.current_revision() is not None
    finally:
        await db.close()


def test_the_head_revision_is_the_newest_migration() -> None:
    """A start finds an archive at `HEAD_REVISION` migrated without loading alembic: a
    migration added without moving the constant would never be run on an existing archive."""
    assert head_revision() == HEAD_REVISION


async def test_an_archive_at_head_is_opened_without_loading_alembic(database_url: str) -> None:
    await (await Database.open(database_url)).close()  # migrated: alembic runs the first time
    opened = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        REOPEN,
        database_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(opened.communicate(), 60)
    assert opened.returncode == 0, err.decode()
    assert out.decode().splitlines()[-1].split() == [HEAD_REVISION, "False"]


# A process of its own: the test process has loaded alembic already.
REOPEN = """
import asyncio, sys
from gateway.store.db import Database

async def main():
    db = await Database.open(sys.argv[1])
    print(await db.current_revision(), "alembic" in sys.modules)
    await db.close()

asyncio.run(main())
"""
