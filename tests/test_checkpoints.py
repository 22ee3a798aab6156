"""The SQLite archive's WAL checkpoints run on their own thread, not inside the writer's commits:
the writer's connection leaves them far out, and the checkpointer keeps the log short."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlmodel import Session
from support import wait_until

from gateway.store.checkpoints import WRITER_AUTOCHECKPOINT
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
