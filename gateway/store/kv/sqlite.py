"""The KV store in one SQLite file (WAL mode), shared by several processes on one machine.

Expiry compares against wall-clock time from a `Clock` (the system clock unless a test hands
in its own), because several processes must agree on it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Final, TypeVar

import aiosqlite
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.logs import get_logger
from gateway.store.kv.base import KVStore, check_ttl, check_value
from gateway.store.sqlite_setup import SQLITE_BUSY_TIMEOUT_MS, is_locked

_log = get_logger(__name__)
_T = TypeVar("_T")

# How long a SQLite operation keeps retrying "database is locked" on top of busy_timeout.
_LOCK_RETRY_SECONDS: Final = 30.0
_PURGE_INTERVAL_SECONDS: Final = 60.0


def _prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with `prefix`.

    SQLite compares TEXT byte-wise in UTF-8, which orders like code points, so bumping the
    last code point that can be bumped gives an exclusive upper bound. None means unbounded.
    """
    chars = list(prefix)
    while chars:
        code = ord(chars.pop())
        if code < 0x10FFFF:
            code += 1
            if 0xD800 <= code <= 0xDFFF:  # surrogates cannot be encoded; skip past them
                code = 0xE000
            return "".join(chars) + chr(code)
    return None


def sqlite_path_from_url(url: str) -> Path:
    """The file path of a `sqlite:///<path>` URL.

    As with SQLAlchemy, what follows `sqlite:///` is the path: `sqlite:////abs/kv.db` is
    absolute, `sqlite:///rel/kv.db` is relative to the working directory.
    """
    scheme, sep, rest = url.partition("://")
    if scheme != "sqlite" or not sep or not rest.startswith("/"):
        raise ValueError(f"not a SQLite KV URL: {url!r} (expected sqlite:///<path>)")
    path = rest[1:].split("?", 1)[0]
    if not path:
        raise ValueError(f"SQLite KV URL has no file path: {url!r}")
    return Path(path).expanduser()


class SqliteKV(KVStore):
    """A KV store in one SQLite file, shared safely by several processes on one machine.

    Create it with `await SqliteKV.open(path)`. Expired rows are hidden from reads at once
    and deleted lazily, at most once per `purge_interval` seconds, during `set`.
    """

    def __init__(
        self,
        conn: aiosqlite.Connection,
        path: Path,
        *,
        purge_interval: float = _PURGE_INTERVAL_SECONDS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._conn = conn
        self.path = path
        self._purge_interval = purge_interval
        self._clock = clock
        self._last_purge = clock.monotonic()
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        purge_interval: float = _PURGE_INTERVAL_SECONDS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> SqliteKV:
        file = Path(path)
        await asyncio.to_thread(file.parent.mkdir, parents=True, exist_ok=True)
        try:
            conn = await _connect(file)
        except sqlite3.DatabaseError as exc:
            if not _is_corrupt(exc):
                raise
            # The file holds only caches and presence, which rebuild themselves: losing them
            # costs a few cache misses, refusing to start costs the whole gateway. It is kept
            # aside rather than deleted, for whoever wants to look at what happened to it.
            aside = await asyncio.to_thread(_move_aside, file, clock.now_ms())
            _log.warning(
                "KV store unreadable; moved aside, starting with an empty one",
                path=str(file),
                moved_to=str(aside),
                error=str(exc),
            )
            conn = await _connect(file)
        store = cls(conn, file, purge_interval=purge_interval, clock=clock)
        await store.purge_expired()
        return store

    async def get(self, key: str) -> str | None:
        rows = await self._run(
            lambda: self._conn.execute_fetchall(
                "SELECT value FROM kv WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)",
                (key, self._now()),
            )
        )
        for row in rows:
            value: str = row[0]
            return value
        return None

    async def set(self, key: str, value: str, ttl: float | None = None) -> None:
        check_ttl(ttl)
        check_value(value)
        now = self._now()
        expires_at = None if ttl is None else now + ttl
        await self._write(
            "INSERT INTO kv (key, value, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
            "expires_at = excluded.expires_at",
            (key, value, expires_at),
        )
        if self._clock.monotonic() - self._last_purge >= self._purge_interval:
            await self.purge_expired()

    async def delete(self, key: str) -> bool:
        rows = await self._run(
            lambda: self._conn.execute_fetchall(
                "DELETE FROM kv WHERE key = ? RETURNING expires_at", (key,)
            )
        )
        now = self._now()
        return any(row[0] is None or row[0] > now for row in rows)

    async def scan(self, prefix: str) -> dict[str, str]:
        rows = await self._live("key, value", prefix)
        return {row[0]: row[1] for row in rows}

    async def keys(self, prefix: str) -> list[str]:
        return [row[0] for row in await self._live("key", prefix)]

    async def _live(self, columns: str, prefix: str) -> Iterable[sqlite3.Row]:
        now = self._now()
        upper = _prefix_upper_bound(prefix)
        if upper is None:
            sql = (
                f"SELECT {columns} FROM kv WHERE key >= ? "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY key"
            )
            params: tuple[object, ...] = (prefix, now)
        else:
            sql = (
                f"SELECT {columns} FROM kv WHERE key >= ? AND key < ? "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY key"
            )
            params = (prefix, upper, now)
        return await self._run(lambda: self._conn.execute_fetchall(sql, params))

    async def expire(self, key: str, ttl: float) -> bool:
        check_ttl(ttl)
        now = self._now()
        changed = await self._write(
            "UPDATE kv SET expires_at = ? WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)",
            (now + ttl, key, now),
        )
        return changed > 0

    async def purge_expired(self) -> int:
        """Delete every expired row now; returns how many went."""
        self._last_purge = self._clock.monotonic()
        removed = await self._write(
            "DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= ?", (self._now(),)
        )
        if removed:
            _log.debug("kv_purged", path=str(self.path), rows=removed)
        return removed

    async def scrub(self) -> None:
        """Rebuild the file without the pages deleted values were left in, and empty the
        write-ahead log that still holds their frames."""

        async def rebuild() -> None:
            await self._conn.execute("VACUUM")
            await self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        await self._run(rebuild)

    def _now(self) -> float:
        """Wall-clock seconds, the unit of the `expires_at` column."""
        return self._clock.now_ms() / 1000

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._conn.close()

    async def _write(self, sql: str, params: tuple[object, ...]) -> int:
        async def run() -> int:
            async with self._conn.execute(sql, params) as cursor:
                return cursor.rowcount

        return await self._run(run)

    async def _run(self, op: Callable[[], Awaitable[_T]]) -> _T:
        if self._closed:
            raise RuntimeError("KV store is closed")
        return await _retry_locked(op)


async def _connect(file: Path) -> aiosqlite.Connection:
    """A connection to `file` with the schema in place, once SQLite has read the file whole."""
    # isolation_level=None: autocommit, so each statement is its own short transaction.
    busy_seconds = SQLITE_BUSY_TIMEOUT_MS / 1000
    conn = await aiosqlite.connect(file, isolation_level=None, timeout=busy_seconds)
    try:
        await _retry_locked(lambda: _init_schema(conn))
        # A file damaged past its header opens and fails later, mid-request: found here, it
        # is moved aside before anything uses it. The store is small (caches, presence).
        rows = list(await conn.execute_fetchall("PRAGMA quick_check"))
        if [tuple(row) for row in rows] != [("ok",)]:
            raise sqlite3.DatabaseError(f"quick_check: {rows[0][0] if rows else 'no answer'}")
    except BaseException:
        await conn.close()
        raise
    return conn


def _is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite could not make sense of the file itself ("file is not a database",
    "database disk image is malformed"), as opposed to not reaching it (locked, no
    permission, disk I/O), which moving the file aside would not mend."""
    return not isinstance(exc, sqlite3.OperationalError)


def _move_aside(file: Path, at_ms: int) -> Path:
    """Rename `file` (and its WAL and shared-memory files, which belong to it) out of the way."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at_ms / 1000))
    aside = file.with_name(f"{file.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        part = file.with_name(file.name + suffix)
        if part.exists():
            part.rename(aside.with_name(aside.name + suffix))
    return aside


async def _init_schema(conn: aiosqlite.Connection) -> None:
    await conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    await conn.execute("PRAGMA journal_mode = WAL")
    await conn.execute("PRAGMA synchronous = NORMAL")
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL)"
    )
    await conn.execute("CREATE INDEX IF NOT EXISTS kv_expires_at ON kv (expires_at)")


async def _retry_locked(op: Callable[[], Awaitable[_T]]) -> _T:
    """Run `op`, retrying while another process holds the SQLite write lock."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(is_locked),
        stop=stop_after_delay(_LOCK_RETRY_SECONDS),
        wait=wait_random_exponential(multiplier=0.02, max=0.5),
        reraise=True,
    ):
        with attempt:
            return await op()
    raise AssertionError("unreachable")  # pragma: no cover
