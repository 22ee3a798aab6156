"""How every SQLite connection of the gateway is set up, and what a write or read does when
another process holds the lock: the busy timeout waits for it, and past that it is tried again."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential_jitter

SQLITE_BUSY_TIMEOUT_MS = 5000


def is_locked(exc: BaseException) -> bool:
    # Lean statements (gateway.store.lean) raise the driver's own error, unwrapped.
    return isinstance(exc, OperationalError | sqlite3.OperationalError) and (
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


def sqlite_engine(url: str, *, begin: str, pool_size: int, also: Sequence[str] = ()) -> Engine:
    """An engine whose connections have `sqlite_pragmas()` and the pragmas `also`."""
    engine = create_engine(url, pool_size=pool_size, max_overflow=0)
    pragmas = [*sqlite_pragmas(), *also]

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let the begin event below decide how transactions start (the driver would otherwise
        # open them lazily and deferred).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # The group writer begins its batches on the driver itself (see `group_commit`).
        if not conn.connection.dbapi_connection.in_transaction:  # type: ignore[union-attr]
            conn.exec_driver_sql(begin)

    return engine


def while_locked() -> AsyncRetrying:
    # Past the busy timeout, a write that still meets another process's lock waits and tries
    # again rather than failing the user's message.
    return AsyncRetrying(
        retry=retry_if_exception(is_locked),
        wait=wait_exponential_jitter(multiplier=0.05, max=1.0),
        stop=stop_after_delay(60),
        reraise=True,
    )
