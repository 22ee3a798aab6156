"""A small async key-value store with per-key expiry.

Two backends share one interface, `KVStore`:

* `SqliteKV` - one SQLite file in WAL mode; several processes on one machine can share it.
* `RedisKV` - a Redis server, for instances spread over several machines.

`open_kv` picks the backend from a URL (`sqlite:///...`, `redis://...`, `rediss://...`).
Values are strings; callers encode structured values as JSON themselves.

Expiry uses wall-clock time (`time.time()`), because several processes must agree on it.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Final, Self, TypeVar

import aiosqlite
import redis.asyncio as aioredis
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from gateway.logs import get_logger
from gateway.settings import mask_url

__all__ = [
    "ERROR_MEMORY_PREFIX",
    "ERROR_MEMORY_TTL",
    "TOOL_CACHE_PREFIX",
    "TOOL_CACHE_TTL",
    "KVNamespace",
    "KVStore",
    "RedisKV",
    "SqliteKV",
    "error_memory",
    "open_kv",
    "sqlite_path_from_url",
    "tool_cache",
]

_log = get_logger("gateway.store.kv")
_T = TypeVar("_T")

TOOL_CACHE_PREFIX: Final = "toolcache:"
TOOL_CACHE_TTL: Final = 60.0 * 60.0
ERROR_MEMORY_PREFIX: Final = "errmem:"
ERROR_MEMORY_TTL: Final = 24.0 * 60.0 * 60.0

# How long a SQLite operation keeps retrying "database is locked" on top of busy_timeout.
_LOCK_RETRY_SECONDS: Final = 30.0
_BUSY_TIMEOUT_MS: Final = 5000
_PURGE_INTERVAL_SECONDS: Final = 60.0
_SCAN_BATCH: Final = 500


def _check_ttl(ttl: float | None) -> None:
    if ttl is not None and (not math.isfinite(ttl) or ttl <= 0):
        raise ValueError(f"ttl must be a positive number of seconds, got {ttl!r}")


class KVStore(ABC):
    """String keys to string values, each optionally expiring after a TTL in seconds.

    An expired key behaves exactly like a missing one. Usable as an async context manager,
    which closes the store on exit.
    """

    @abstractmethod
    async def get(self, key: str) -> str | None:
        """The live value of `key`, or None if it is missing or expired."""

    @abstractmethod
    async def set(self, key: str, value: str, ttl: float | None = None) -> None:
        """Store `value` under `key`, expiring after `ttl` seconds (None: never)."""

    @abstractmethod
    async def delete(self, key: str) -> bool:
        """Remove `key`; True if a live key was removed."""

    @abstractmethod
    async def scan(self, prefix: str) -> dict[str, str]:
        """Every live key starting with `prefix` (taken literally, no wildcards) and its value."""

    @abstractmethod
    async def expire(self, key: str, ttl: float) -> bool:
        """Make a live `key` expire `ttl` seconds from now; False if it is missing or expired."""

    @abstractmethod
    async def close(self) -> None:
        """Release the connection. Calling it twice is harmless."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


# --------------------------------------------------------------------------- SQLite


def _is_locked(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    message = str(exc).lower()
    return "database is locked" in message or "database is busy" in message


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
    ) -> None:
        self._conn = conn
        self.path = path
        self._purge_interval = purge_interval
        self._last_purge = time.monotonic()
        self._closed = False

    @classmethod
    async def open(
        cls, path: str | Path, *, purge_interval: float = _PURGE_INTERVAL_SECONDS
    ) -> SqliteKV:
        file = Path(path)
        await asyncio.to_thread(file.parent.mkdir, parents=True, exist_ok=True)
        # isolation_level=None: autocommit, so each statement is its own short transaction.
        conn = await aiosqlite.connect(file, isolation_level=None, timeout=_BUSY_TIMEOUT_MS / 1000)
        try:
            await _retry_locked(lambda: _init_schema(conn))
        except BaseException:
            await conn.close()
            raise
        store = cls(conn, file, purge_interval=purge_interval)
        await store.purge_expired()
        return store

    async def get(self, key: str) -> str | None:
        rows = await self._run(
            lambda: self._conn.execute_fetchall(
                "SELECT value FROM kv WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)",
                (key, time.time()),
            )
        )
        for row in rows:
            value: str = row[0]
            return value
        return None

    async def set(self, key: str, value: str, ttl: float | None = None) -> None:
        _check_ttl(ttl)
        if not isinstance(value, str):
            raise TypeError(f"KV values are str, got {type(value).__name__}")
        now = time.time()
        expires_at = None if ttl is None else now + ttl
        await self._write(
            "INSERT INTO kv (key, value, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
            "expires_at = excluded.expires_at",
            (key, value, expires_at),
        )
        if time.monotonic() - self._last_purge >= self._purge_interval:
            await self.purge_expired()

    async def delete(self, key: str) -> bool:
        rows = await self._run(
            lambda: self._conn.execute_fetchall(
                "DELETE FROM kv WHERE key = ? RETURNING expires_at", (key,)
            )
        )
        now = time.time()
        return any(row[0] is None or row[0] > now for row in rows)

    async def scan(self, prefix: str) -> dict[str, str]:
        now = time.time()
        upper = _prefix_upper_bound(prefix)
        if upper is None:
            sql = (
                "SELECT key, value FROM kv WHERE key >= ? "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY key"
            )
            params: tuple[object, ...] = (prefix, now)
        else:
            sql = (
                "SELECT key, value FROM kv WHERE key >= ? AND key < ? "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY key"
            )
            params = (prefix, upper, now)
        rows = await self._run(lambda: self._conn.execute_fetchall(sql, params))
        return {row[0]: row[1] for row in rows}

    async def expire(self, key: str, ttl: float) -> bool:
        _check_ttl(ttl)
        now = time.time()
        changed = await self._write(
            "UPDATE kv SET expires_at = ? WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)",
            (now + ttl, key, now),
        )
        return changed > 0

    async def purge_expired(self) -> int:
        """Delete every expired row now; returns how many went."""
        self._last_purge = time.monotonic()
        removed = await self._write(
            "DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= ?", (time.time(),)
        )
        if removed:
            _log.debug("kv_purged", path=str(self.path), rows=removed)
        return removed

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


async def _init_schema(conn: aiosqlite.Connection) -> None:
    await conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    await conn.execute("PRAGMA journal_mode = WAL")
    await conn.execute("PRAGMA synchronous = NORMAL")
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL)"
    )
    await conn.execute("CREATE INDEX IF NOT EXISTS kv_expires_at ON kv (expires_at)")


async def _retry_locked(op: Callable[[], Awaitable[_T]]) -> _T:
    """Run `op`, retrying while another process holds the SQLite write lock."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(_is_locked),
        stop=stop_after_delay(_LOCK_RETRY_SECONDS),
        wait=wait_random_exponential(multiplier=0.02, max=0.5),
        reraise=True,
    ):
        with attempt:
            return await op()
    raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- Redis


def _glob_escape(text: str) -> str:
    """Escape Redis glob metacharacters so `text` matches only itself."""
    out = []
    for char in text:
        if char in "\\*?[]^":
            out.append("\\")
        out.append(char)
    return "".join(out)


def _text(value: bytes | str | None) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value


def _millis(ttl: float) -> int:
    return max(1, math.ceil(ttl * 1000))


class RedisKV(KVStore):
    """A KV store on a Redis server.

    `key_prefix` is prepended to every key on the server and hidden from callers, so several
    deployments (or test runs) can share one Redis database.
    """

    def __init__(self, client: aioredis.Redis, *, key_prefix: str = "") -> None:
        self._redis = client
        self._prefix = key_prefix
        self._closed = False

    @classmethod
    async def from_url(cls, url: str, *, key_prefix: str = "") -> RedisKV:
        client = aioredis.Redis.from_url(url, decode_responses=True)
        try:
            await client.ping()
        except BaseException:
            await client.aclose()
            raise
        return cls(client, key_prefix=key_prefix)

    async def get(self, key: str) -> str | None:
        return _text(await self._redis.get(self._prefix + key))

    async def set(self, key: str, value: str, ttl: float | None = None) -> None:
        _check_ttl(ttl)
        if not isinstance(value, str):
            raise TypeError(f"KV values are str, got {type(value).__name__}")
        if ttl is None:
            await self._redis.set(self._prefix + key, value)
        else:
            await self._redis.set(self._prefix + key, value, px=_millis(ttl))

    async def delete(self, key: str) -> bool:
        removed: int = await self._redis.delete(self._prefix + key)
        return removed > 0

    async def scan(self, prefix: str) -> dict[str, str]:
        full_prefix = self._prefix + prefix
        pattern = _glob_escape(full_prefix) + "*"
        keys: list[str] = []
        async for key in self._redis.scan_iter(match=pattern, count=_SCAN_BATCH):
            text = _text(key)
            if text is not None:
                keys.append(text)
        found: dict[str, str] = {}
        unique = sorted(set(keys))  # SCAN may return a key more than once
        for start in range(0, len(unique), _SCAN_BATCH):
            batch = unique[start : start + _SCAN_BATCH]
            values = await self._redis.mget(batch)
            for key, raw in zip(batch, values, strict=True):
                value = _text(raw)
                if value is not None:  # expired between SCAN and MGET
                    found[key[len(self._prefix) :]] = value
        return found

    async def expire(self, key: str, ttl: float) -> bool:
        _check_ttl(ttl)
        changed: bool = await self._redis.pexpire(self._prefix + key, _millis(ttl))
        return bool(changed)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._redis.aclose()


# --------------------------------------------------------------------------- opening


async def open_kv(url: str) -> KVStore:
    """Open the store a URL names: `sqlite:///<path>`, `redis://...` or `rediss://...`."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme == "sqlite":
        return await SqliteKV.open(sqlite_path_from_url(url))
    if scheme in ("redis", "rediss"):
        return await RedisKV.from_url(url)
    raise ValueError(
        f"unsupported KV URL {mask_url(url)!r}: expected sqlite:///<path to file>, "
        "redis://host[:port][/db] or rediss://host[:port][/db]"
    )


# --------------------------------------------------------------------------- namespaces


class KVNamespace:
    """A view of a `KVStore` whose keys all start with `prefix`, with a default TTL.

    Keys passed in and returned are relative to the prefix. `set` without a `ttl` uses
    `default_ttl` (None: never expire).
    """

    def __init__(self, kv: KVStore, prefix: str, default_ttl: float | None = None) -> None:
        if not prefix:
            raise ValueError("a KV namespace needs a non-empty prefix")
        _check_ttl(default_ttl)
        self.kv = kv
        self.prefix = prefix
        self.default_ttl = default_ttl

    def key(self, key: str) -> str:
        return self.prefix + key

    async def get(self, key: str) -> str | None:
        return await self.kv.get(self.prefix + key)

    async def set(self, key: str, value: str, ttl: float | None = None) -> None:
        await self.kv.set(self.prefix + key, value, self.default_ttl if ttl is None else ttl)

    async def delete(self, key: str) -> bool:
        return await self.kv.delete(self.prefix + key)

    async def expire(self, key: str, ttl: float | None = None) -> bool:
        chosen = self.default_ttl if ttl is None else ttl
        if chosen is None:
            raise ValueError("no ttl given and the namespace has no default ttl")
        return await self.kv.expire(self.prefix + key, chosen)

    async def scan(self, prefix: str = "") -> dict[str, str]:
        found = await self.kv.scan(self.prefix + prefix)
        cut = len(self.prefix)
        return {key[cut:]: value for key, value in found.items()}


def tool_cache(kv: KVStore, ttl: float = TOOL_CACHE_TTL) -> KVNamespace:
    """Cached tool results, under `toolcache:`, kept an hour by default."""
    return KVNamespace(kv, TOOL_CACHE_PREFIX, ttl)


def error_memory(kv: KVStore, ttl: float = ERROR_MEMORY_TTL) -> KVNamespace:
    """Recently seen errors, under `errmem:`, kept a day by default."""
    return KVNamespace(kv, ERROR_MEMORY_PREFIX, ttl)
