"""SQLite's reader threads: reads run side by side, a failure spoils nothing, close drains; the
short lean reads run in batches, one snapshot each, and a long read is kept out of them."""

from __future__ import annotations

import asyncio
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection

from gateway.store.db import Database
from gateway.store.lean import Lean
from gateway.store.readers import ReaderThreads


async def test_a_long_read_does_not_hold_up_the_short_ones(tmp_path: Path) -> None:
    db = await Database.open(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        release = threading.Event()

        def slow(sql: Lean) -> int:
            assert release.wait(10), "never released"
            return int(sql.value("SELECT 1"))

        held = asyncio.ensure_future(db.read_lean(slow, long=True))
        quick = [await db.read_lean(partial(_select, i)) for i in range(20)]
        assert quick == list(range(20))
        assert not held.done()
        release.set()
        assert await asyncio.wait_for(held, 10) == 1
    finally:
        await db.close()


async def test_a_failed_read_leaves_the_next_one_a_clean_connection(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'r.db'}")
    readers = ReaderThreads(engine, 1, "test-read")
    try:

        def breaks(conn: Connection) -> None:
            conn.connection.dbapi_connection.execute("BEGIN")  # type: ignore[union-attr]
            raise RuntimeError("read went wrong")

        def in_transaction(conn: Connection) -> bool:
            return bool(conn.connection.dbapi_connection.in_transaction)  # type: ignore[union-attr]

        with pytest.raises(RuntimeError, match="read went wrong"):
            await readers.run(breaks)
        assert await readers.run(in_transaction) is False
        assert await readers.run(lambda conn: conn.execute(text("SELECT 7")).scalar()) == 7
    finally:
        await asyncio.to_thread(readers.close)
        engine.dispose()


async def test_close_answers_every_read_queued_before_it(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'r.db'}")
    readers = ReaderThreads(engine, 2, "test-read")
    reads = [asyncio.ensure_future(readers.run(partial(_scalar, f"SELECT {i}"))) for i in range(50)]
    await asyncio.sleep(0)  # every read queued
    await asyncio.to_thread(readers.close)
    results = await asyncio.wait_for(asyncio.gather(*reads), 10)
    assert results == list(range(50))
    engine.dispose()


async def test_a_closed_database_refuses_reads_and_writes_at_once(tmp_path: Path) -> None:
    db = await Database.open(f"sqlite:///{tmp_path / 'history.db'}")
    await db.close()
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.wait_for(db.read_lean(lambda sql: sql.value("SELECT 1")), 5)
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.wait_for(db.write_lean(lambda sql: sql.value("SELECT 1")), 5)


async def test_short_reads_queued_together_share_one_snapshot_and_see_earlier_writes(
    tmp_path: Path,
) -> None:
    db = await Database.open(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        await db.write_lean(lambda sql: sql.run("CREATE TABLE t (v INTEGER)"))
        release, started = threading.Event(), threading.Event()

        def first(sql: Lean) -> int:
            seen = int(sql.value("SELECT count(*) FROM t"))  # its snapshot begins here
            started.set()
            assert release.wait(10), "never released"
            return seen

        held = asyncio.ensure_future(db.read_lean(first))
        assert await asyncio.to_thread(started.wait, 10)
        # Written while the first read runs: every read queued after it must see the row.
        await db.write_lean(lambda sql: sql.run("INSERT INTO t VALUES (1)"))
        queued = [asyncio.ensure_future(db.read_lean(_count_and_snapshot)) for _ in range(10)]
        await asyncio.sleep(0)  # all queued behind the held read
        release.set()
        assert await asyncio.wait_for(held, 10) == 0
        results = await asyncio.wait_for(asyncio.gather(*queued), 10)
        assert [count for count, _ in results] == [1] * 10
        # They ran in one batch, one transaction: each saw the marks of those before it.
        assert sorted(marks for _, marks in results) == list(range(1, 11))
        # And it ended with the batch: the next read sees none of them.
        assert await db.read_lean(_marks) == 0
    finally:
        await db.close()


async def test_a_failing_short_read_fails_alone_and_the_next_batch_is_clean(
    tmp_path: Path,
) -> None:
    db = await Database.open(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        reads = [
            asyncio.ensure_future(db.read_lean(partial(_select, 1))),
            asyncio.ensure_future(db.read_lean(lambda sql: sql.value("SELECT * FROM nowhere"))),
            asyncio.ensure_future(db.read_lean(partial(_select, 3))),
        ]
        results = await asyncio.wait_for(asyncio.gather(*reads, return_exceptions=True), 10)
        assert results[0] == 1 and results[2] == 3
        assert "nowhere" in str(results[1])
        assert await db.read_lean(partial(_select, 4)) == 4
    finally:
        await db.close()


def _count_and_snapshot(sql: Lean) -> tuple[int, int]:
    # A mark left in a temporary table is seen by the reads after it in the same transaction
    # and is gone once that transaction is rolled back.
    count = int(sql.value("SELECT count(*) FROM t"))
    _marks(sql)
    sql.run("INSERT INTO batch_marker VALUES (1)")
    return count, _marks(sql)


def _marks(sql: Lean) -> int:
    sql.run("CREATE TEMP TABLE IF NOT EXISTS batch_marker (n INTEGER)")
    return int(sql.value("SELECT count(*) FROM batch_marker"))


def _select(value: int, sql: Lean) -> int:
    return int(sql.value("SELECT ?", value))


def _scalar(statement: str, conn: Connection) -> Any:
    return conn.execute(text(statement)).scalar()
