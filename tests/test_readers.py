"""SQLite's reader threads: reads run side by side, a failure spoils nothing, close drains."""

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


async def test_a_slow_read_does_not_hold_up_the_others(tmp_path: Path) -> None:
    db = await Database.open(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        release = threading.Event()

        def slow(sql: Lean) -> int:
            assert release.wait(10), "never released"
            return int(sql.value("SELECT 1"))

        held = asyncio.ensure_future(db.read_lean(slow))
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


def _select(value: int, sql: Lean) -> int:
    return int(sql.value("SELECT ?", value))


def _scalar(statement: str, conn: Connection) -> Any:
    return conn.execute(text(statement)).scalar()
