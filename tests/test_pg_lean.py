"""The lean statements on PostgreSQL (`gateway.store.pg_lean`): a write is atomic, counts are
the server's, and a connection the server ended is replaced without losing the work."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import PG_ADMIN_DSN, _pg_database, _pg_drop
from support import wait_until

from gateway.store.db import Database
from gateway.store.errors import DatabaseUnavailable, OutcomeUnknown
from gateway.store.lean import Lean


@pytest.fixture
async def db() -> AsyncIterator[tuple[Database, str]]:
    url, name = await _pg_database()
    opened = await Database.open(url)
    await opened.write_lean(
        lambda sql: sql.run("CREATE TABLE lean_t (k TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    )
    try:
        yield opened, name
    finally:
        await opened.close()
        await _pg_drop(name)


def _count(sql: Lean) -> int:
    return int(sql.value("SELECT count(*) FROM lean_t"))


async def test_a_write_that_fails_half_way_leaves_nothing(db: tuple[Database, str]) -> None:
    database, _ = db

    def half(sql: Lean) -> None:
        sql.run("INSERT INTO lean_t (k, n) VALUES (?, ?)", "a", 1)
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        await database.write_lean(half)
    assert await database.read_lean(_count) == 0
    # The connection went back to the pool usable, outside any transaction.
    await database.write_lean(lambda sql: sql.run("INSERT INTO lean_t VALUES (?, ?)", "b", 2))
    assert await database.read_lean(lambda sql: sql.all("SELECT k, n FROM lean_t")) == [("b", 2)]


async def test_run_counts_the_rows_the_server_changed(db: tuple[Database, str]) -> None:
    database, _ = db

    def fill(sql: Lean) -> list[int]:
        return [
            sql.run("INSERT INTO lean_t (k, n) VALUES (?, ?), (?, ?)", "a", 1, "b", 1),
            sql.run("UPDATE lean_t SET n = n + 1 WHERE n = ?", 1),
            sql.run("DELETE FROM lean_t WHERE k = ?", "none"),
        ]

    assert await database.write_lean(fill) == [2, 2, 0]
    assert await database.read_lean(lambda sql: sql.one("SELECT k FROM lean_t WHERE n = 9")) is None


def _end_backends_blocking(name: str) -> None:
    """End every server connection to database `name`, from another thread, while the caller's
    event loop is blocked: the pool cannot have seen those connections end when it next lends
    one out."""

    async def end() -> None:
        import asyncpg  # type: ignore[import-untyped]

        admin = await asyncpg.connect(PG_ADMIN_DSN, timeout=5)
        try:
            ended = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
            assert ended >= 1

            async def gone() -> bool:  # the server has let them go
                left = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
                return bool(await admin.fetchval(left, name) == 0)

            assert await wait_until(gone, within=10)
        finally:
            await admin.close()

    with ThreadPoolExecutor(1) as other:
        other.submit(asyncio.run, end()).result()  # blocks this loop; raises what `end` raised


async def test_a_read_after_the_server_ended_its_connection_is_read_again(
    db: tuple[Database, str],
) -> None:
    database, name = db
    await database.write_lean(lambda sql: sql.run("INSERT INTO lean_t VALUES (?, ?)", "a", 1))
    assert await database.read_lean(_count) == 1  # the pool now holds a live connection
    _end_backends_blocking(name)
    assert await database.read_lean(_count) == 1


async def test_a_write_whose_connection_was_ended_before_it_began_is_written_once(
    db: tuple[Database, str],
) -> None:
    database, name = db
    assert await database.read_lean(_count) == 0
    _end_backends_blocking(name)
    await database.write_lean(lambda sql: sql.run("INSERT INTO lean_t VALUES (?, ?)", "a", 1))
    assert await database.read_lean(lambda sql: sql.all("SELECT k, n FROM lean_t")) == [("a", 1)]


async def test_no_server_to_connect_to_is_database_unavailable() -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    database = Database(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/none")
    try:
        with pytest.raises(DatabaseUnavailable, match="cannot be reached"):
            await database.read_lean(_count)
        with pytest.raises(DatabaseUnavailable):
            await database.write_lean(lambda sql: sql.run("SELECT 1"))
    finally:
        await database.close()


async def test_a_write_whose_connection_ends_half_way_is_written_once(
    db: tuple[Database, str],
) -> None:
    """The server ends the connection between two statements of a write: nothing of it was
    committed, so it runs again on another connection, and its rows are there once."""
    database, name = db
    attempts: list[int] = []

    def two_rows(sql: Lean) -> None:
        attempts.append(1)
        sql.run("INSERT INTO lean_t VALUES (?, ?)", "a", 1)
        if len(attempts) == 1:
            _end_backends_blocking(name)  # between the two statements, COMMIT not yet sent
        sql.run("INSERT INTO lean_t VALUES (?, ?)", "b", 2)

    await database.write_lean(two_rows)
    assert len(attempts) == 2
    rows = await database.read_lean(lambda sql: sql.all("SELECT k, n FROM lean_t ORDER BY k"))
    assert rows == [("a", 1), ("b", 2)]


async def test_one_statement_is_committed_whole_or_not_at_all(db: tuple[Database, str]) -> None:
    """`write_one` runs without BEGIN and COMMIT: PostgreSQL commits the statement on its own,
    so a WITH whose last part fails keeps none of its parts."""
    database, _ = db
    both = "WITH first AS (INSERT INTO lean_t VALUES ('a', 1)) INSERT INTO lean_t VALUES ('a', 2)"
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        await database.write_one(both, repeatable=False)
    assert await database.read_lean(_count) == 0
    rows = await database.write_one(
        "WITH first AS (INSERT INTO lean_t VALUES ('a', 1))"
        " INSERT INTO lean_t VALUES ('b', 2) RETURNING k",
        repeatable=False,
    )
    assert rows == [("b",)]
    assert await database.read_lean(_count) == 2


async def test_one_statement_on_an_ended_connection_runs_again_only_when_repeatable(
    db: tuple[Database, str],
) -> None:
    """The pool lends a connection the server ended: a statement that may run twice runs on
    another one; any other may or may not have landed, which the caller is told."""
    database, name = db
    assert await database.read_lean(_count) == 0  # the pool now holds a live connection
    _end_backends_blocking(name)
    upsert = "INSERT INTO lean_t VALUES ('a', 1) ON CONFLICT DO NOTHING"
    await database.write_one(upsert, repeatable=True)
    assert await database.read_lean(lambda sql: sql.all("SELECT k, n FROM lean_t")) == [("a", 1)]
    _end_backends_blocking(name)
    with pytest.raises(OutcomeUnknown, match="ended under a write"):
        await database.write_one("INSERT INTO lean_t VALUES ('b', 2)", repeatable=False)
