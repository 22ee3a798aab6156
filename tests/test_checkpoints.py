"""The SQLite archive's WAL checkpoints run on their own thread, not inside the writer's commits:
the writer's connection leaves them far out, and the checkpointer keeps the log short."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlmodel import Session
from support import wait_until

from gateway.store.checkpoints import WAL_KEEP_BYTES, WRITER_AUTOCHECKPOINT
from gateway.store.db import Database

PAGE = 4096
WRITES = 12
PAGES_PER_WRITE = 200


async def test_the_log_is_checkpointed_off_the_writer_and_kept_short(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    db = await Database.open(f"sqlite:///{path}")
    try:
        assert db.checkpoints is not None

        def setup(session: Session) -> int:
            conn = session.connection()
            conn.exec_driver_sql("CREATE TABLE scratch (b BLOB)")
            found = conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar()
            return int(found or 0)

        # The writer would checkpoint only far past what this test writes.
        assert await db.write(setup) == WRITER_AUTOCHECKPOINT
        assert WRITES * PAGES_PER_WRITE < WRITER_AUTOCHECKPOINT

        blob = b"\1" * (PAGE * PAGES_PER_WRITE)
        for _ in range(WRITES):
            before = db.checkpoints.runs
            await db.write_lean(lambda sql: sql.run("INSERT INTO scratch VALUES (?)", blob))

            async def checkpointed(before: int = before) -> bool:
                return db.checkpoints is not None and db.checkpoints.runs > before

            assert await wait_until(checkpointed, 5)

        written = WRITES * PAGES_PER_WRITE * PAGE
        wal = path.with_name(path.name + "-wal").stat().st_size
        # Reused from its start after each checkpoint: a few writes' worth, not all of them.
        assert wal < written / 3, (wal, written)
    finally:
        await db.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM scratch").fetchone() == (WRITES,)


async def test_a_log_grown_behind_a_long_reader_is_cut_back_once_reused(tmp_path: Path) -> None:
    """A reader on an old snapshot lets the log grow past the limit; once it is gone and the
    log is checkpointed and reused, its file is cut back instead of keeping that size."""
    path = tmp_path / "history.db"
    db = await Database.open(f"sqlite:///{path}")
    wal = path.with_name(path.name + "-wal")
    try:
        assert db.checkpoints is not None
        await db.write_lean(lambda sql: sql.run("CREATE TABLE scratch (b BLOB)"))
        reader = sqlite3.connect(path)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM scratch").fetchone() == (0,)  # pinned

        blob = b"\1" * (PAGE * PAGES_PER_WRITE)
        pinned_writes = WAL_KEEP_BYTES // len(blob) + 4
        for _ in range(pinned_writes):
            await db.write_lean(lambda sql: sql.run("INSERT INTO scratch VALUES (?)", blob))
        grown = wal.stat().st_size
        assert grown > WAL_KEEP_BYTES  # no checkpoint could pass the reader's snapshot
        reader.rollback()
        reader.close()

        async def cut_back() -> bool:
            assert db.checkpoints is not None
            before = db.checkpoints.runs
            await db.write_lean(lambda sql: sql.run("INSERT INTO scratch VALUES (x'00')"))

            async def checkpointed() -> bool:
                return db.checkpoints is not None and db.checkpoints.runs > before

            assert await wait_until(checkpointed, 5)
            return wal.stat().st_size <= WAL_KEEP_BYTES

        # A commit, its checkpoint (which can now reach the end), the next commit reuses it.
        assert await wait_until(cut_back, 20), (grown, wal.stat().st_size)
    finally:
        await db.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM scratch").fetchone()[0] > pinned_writes
