"""WAL checkpoints of a SQLite archive, on a thread of their own.

SQLite copies the write-ahead log back into the database file (a checkpoint) on the connection
whose commit takes the log past 1,000 pages, inside that commit. On the group writer that
stalled the whole batch, and every write queued behind it, for several milliseconds: the
slowest 1% of messages. Here the writer's own checkpoints are pushed far out
(`WRITER_AUTOCHECKPOINT`, a backstop should this thread fall behind) and this thread runs a
PASSIVE checkpoint — it never waits for a reader or the writer — soon after commits, at most
every `INTERVAL` seconds. Readers then find a short log, and the log's file is reused from its
start once a checkpoint has copied it all and no reader is still on it (and cut back to
`WAL_KEEP_BYTES` then, should a long reader have let it grow).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Final

from gateway.logs import get_logger
from gateway.store.sqlite_setup import SQLITE_BUSY_TIMEOUT_MS
from gateway.threads import daemon_thread

log = get_logger(__name__)

INTERVAL: Final = 0.25
# Pages the writer lets the log reach before it checkpoints itself (SQLite's default: 1,000).
WRITER_AUTOCHECKPOINT: Final = 20_000
# What the log's file is cut back to when it is reused from its start. A reader that stays on an
# old snapshot (a long search, an export) keeps every checkpoint from reaching the log's end, so
# the file grows with what is written meanwhile; without a limit it would keep that size for
# the life of the process. Far above the few hundred KB a quarter of a second of load writes.
WAL_KEEP_BYTES: Final = 16 * 1024 * 1024


class Checkpointer:
    def __init__(self, path: Path, *, interval: float = INTERVAL) -> None:
        self.path = path
        self.interval = interval
        self.runs = 0  # checkpoints run (for tests and the curious)
        self._committed = threading.Event()
        self._stopping = threading.Event()
        self._thread = daemon_thread(self._serve, "agenvoy-db-checkpoint")
        self._thread.start()

    def committed(self) -> None:
        """Told by the writer after a commit (cheap: it sets a flag)."""
        self._committed.set()

    def close(self) -> None:
        """Stop the thread (blocking: call it from a thread). The last connection to close
        checkpoints the log itself."""
        self._stopping.set()
        self._committed.set()
        self._thread.join()

    def _serve(self) -> None:
        conn: sqlite3.Connection | None = None  # opened at the first commit, not before
        try:
            while True:
                self._committed.wait()
                if self._stopping.is_set():
                    return
                self._committed.clear()
                try:
                    if conn is None:
                        conn = sqlite3.connect(self.path, isolation_level=None)
                        conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.runs += 1
                except sqlite3.Error as exc:
                    # A full disk, say: the log keeps what the file could not take, and the
                    # next commit asks again.
                    log.warning("WAL checkpoint failed", error=str(exc))
                if self._stopping.wait(self.interval):
                    return
        finally:
            if conn is not None:
                conn.close()
