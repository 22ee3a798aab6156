from __future__ import annotations

import asyncio
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clock import FakeClock
from support import REDIS_URL, open_redis, wait_until

from gateway.settings import Settings
from gateway.store.kv import KVStore, SqliteKV, open_kv, sqlite_path_from_url
from gateway.store.kv.redis import RedisKV

WORKER = Path(__file__).with_name("kv_worker.py")
# Redis keeps time on its server, so its expiry is waited out for real: TTLs stay short.
# Long enough that a loaded machine reads a key back before Redis expires it.
SHORT_TTL = 0.3
LONG_TTL = 3.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def kv(kv: KVStore, clock: FakeClock) -> AsyncIterator[KVStore]:
    """The shared `kv` stores, the embedded one opened again on its file with `clock`."""
    if not isinstance(kv, SqliteKV):
        yield kv
        return
    async with await SqliteKV.open(kv.path, clock=clock) as timed:
        yield timed


async def run_out(kv: KVStore, clock: FakeClock, key: str, after: float) -> bool:
    """Let `after` seconds pass and tell whether `key` has expired by then.

    The embedded store reads `clock`, which moves at once and leaves no doubt; on Redis the
    test waits for the server to expire the key, bounded by a timeout.
    """
    if isinstance(kv, RedisKV):
        return await wait_until(lambda: key_is_gone(kv, key), within=after + 5)
    await clock.advance(after)
    return await key_is_gone(kv, key)


async def key_is_gone(kv: KVStore, key: str) -> bool:
    return await kv.get(key) is None


# --------------------------------------------------------------------------- contract


async def test_get_set_delete(kv: KVStore) -> None:
    assert await kv.get("k") is None
    await kv.set("k", "one")
    assert await kv.get("k") == "one"
    await kv.set("k", "two")
    assert await kv.get("k") == "two"
    assert await kv.delete("k") is True
    assert await kv.get("k") is None
    assert await kv.delete("k") is False


async def test_values_round_trip_unicode_and_empty(kv: KVStore) -> None:
    await kv.set("ключ:😀", '{"a": "ü\\n"}\n')
    await kv.set("empty", "")
    assert await kv.get("ключ:😀") == '{"a": "ü\\n"}\n'
    assert await kv.get("empty") == ""


async def test_rejects_bad_ttl_and_non_str_values(kv: KVStore) -> None:
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            await kv.set("k", "v", ttl=bad)
    await kv.set("k", "v")
    with pytest.raises(ValueError):
        await kv.expire("k", 0)
    with pytest.raises(TypeError):
        await kv.set("k", 1)  # type: ignore[arg-type]
    assert await kv.get("k") == "v"


async def test_ttl_expiry(kv: KVStore, clock: FakeClock) -> None:
    await kv.set("short", "v", ttl=SHORT_TTL)
    await kv.set("forever", "v")
    assert await kv.get("short") == "v"
    assert await run_out(kv, clock, "short", SHORT_TTL)
    assert await kv.get("short") is None
    assert await kv.scan("short") == {}
    assert await kv.expire("short", 10) is False
    assert await kv.delete("short") is False
    assert await kv.get("forever") == "v"


async def test_set_without_ttl_removes_an_earlier_ttl(kv: KVStore, clock: FakeClock) -> None:
    await kv.set("control", "v", ttl=SHORT_TTL)
    await kv.set("k", "v", ttl=SHORT_TTL)
    await kv.set("k", "w")
    assert await run_out(kv, clock, "control", SHORT_TTL)
    assert await kv.get("k") == "w"


async def test_expire_refresh_keeps_key_alive(kv: KVStore, clock: FakeClock) -> None:
    await kv.set("control", "v", ttl=SHORT_TTL)
    await kv.set("k", "v", ttl=SHORT_TTL)
    assert await kv.expire("k", LONG_TTL) is True
    assert await run_out(kv, clock, "control", SHORT_TTL)
    assert await kv.get("k") == "v"
    # ...and the refreshed ttl still ends.
    assert await run_out(kv, clock, "k", LONG_TTL - SHORT_TTL)


async def test_expire_gives_a_ttl_to_a_permanent_key(kv: KVStore, clock: FakeClock) -> None:
    await kv.set("k", "v")
    assert await kv.expire("k", SHORT_TTL) is True
    assert await run_out(kv, clock, "k", SHORT_TTL)


async def test_expire_missing_key(kv: KVStore) -> None:
    assert await kv.expire("missing", 5) is False
    assert await kv.get("missing") is None


async def test_scan_prefix_is_literal(kv: KVStore) -> None:
    keys = [
        "p:a_b",
        "p:aXb",
        "p:a%b",
        "p:aZZb",
        "p:a*",
        "p:a*b",
        "p:a?",
        "p:ab",
        "p:a[b]",
        "p:ax]",
        "p:a\\b",
        "p:A_b",
        "q:a_b",
        "p",
    ]
    for key in keys:
        await kv.set(key, f"v-{key}")
    assert await kv.scan("p:a_") == {"p:a_b": "v-p:a_b"}
    assert set(await kv.scan("p:a%")) == {"p:a%b"}
    assert set(await kv.scan("p:a*")) == {"p:a*", "p:a*b"}
    assert set(await kv.scan("p:a?")) == {"p:a?"}
    assert set(await kv.scan("p:a[")) == {"p:a[b]"}
    assert set(await kv.scan("p:a\\")) == {"p:a\\b"}
    assert set(await kv.scan("p:A")) == {"p:A_b"}
    assert set(await kv.scan("p:")) == {k for k in keys if k.startswith("p:")}
    assert set(await kv.scan("")) == set(keys)
    assert await kv.scan("nothing:") == {}
    # keys() finds the same keys as scan(), without reading their values.
    for prefix in ("p:a_", "p:a%", "p:a*", "p:a[", "p:", "", "nothing:"):
        assert await kv.keys(prefix) == sorted(await kv.scan(prefix)), prefix


async def test_scan_excludes_expired_keys(kv: KVStore, clock: FakeClock) -> None:
    await kv.set("s:live", "1")
    await kv.set("s:short", "2", ttl=SHORT_TTL)
    assert await kv.scan("s:") == {"s:live": "1", "s:short": "2"}
    assert await run_out(kv, clock, "s:short", SHORT_TTL)
    assert await kv.scan("s:") == {"s:live": "1"}
    assert await kv.keys("s:") == ["s:live"]


async def test_scan_prefix_ending_in_highest_code_points(kv: KVStore) -> None:
    top = "\U0010ffff"
    for key in (f"z{top}", f"z{top}q", "{", "z\ud7ffa", "z\ue000"):
        await kv.set(key, "v")
    assert set(await kv.scan(f"z{top}")) == {f"z{top}", f"z{top}q"}
    assert set(await kv.scan("z\ud7ff")) == {"z\ud7ffa"}


async def test_scan_many_keys(kv: KVStore) -> None:
    for i in range(1200):
        await kv.set(f"many:{i:05d}", str(i))
    await kv.set("manx:1", "no")
    found = await kv.scan("many:")
    assert len(found) == 1200
    assert found["many:01199"] == "1199"


async def test_close_twice_is_harmless(kv: KVStore) -> None:
    await kv.close()
    await kv.close()


# --------------------------------------------------------------------------- open_kv


async def test_open_kv_sqlite_creates_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "kv.db"
    kv = await open_kv(f"sqlite:///{path}")
    try:
        assert isinstance(kv, SqliteKV)
        assert path.is_file()
        await kv.set("k", "v")
    finally:
        await kv.close()
    # A second open of the same file sees the data.
    async with await open_kv(f"sqlite:///{path}") as again:
        assert await again.get("k") == "v"


async def test_open_kv_sqlite_expires_by_the_given_clock(tmp_path: Path, clock: FakeClock) -> None:
    async with await open_kv(f"sqlite:///{tmp_path / 'kv.db'}", clock=clock) as kv:
        await kv.set("k", "v", ttl=30)
        await clock.advance(30)
        assert await kv.get("k") is None


async def test_open_kv_with_settings_default_url(settings: Settings) -> None:
    async with await open_kv(settings.resolved_kv_url) as kv:
        assert isinstance(kv, SqliteKV)
        assert kv.path == settings.store_dir / "kv.db"
        await kv.set("k", "v")
    assert (settings.store_dir / "kv.db").is_file()


def test_sqlite_path_from_url() -> None:
    assert sqlite_path_from_url("sqlite:////abs/dir/kv.db") == Path("/abs/dir/kv.db")
    assert sqlite_path_from_url("sqlite:///rel/kv.db") == Path("rel/kv.db")
    for bad in ("sqlite://", "sqlite:///", "sqlite:/x", "redis://h"):
        with pytest.raises(ValueError):
            sqlite_path_from_url(bad)


async def test_open_kv_redis() -> None:
    probe = await open_redis()
    await probe.close()
    kv = await asyncio.wait_for(open_kv(REDIS_URL), 5)
    try:
        assert isinstance(kv, RedisKV)
    finally:
        await kv.close()


@pytest.mark.parametrize(
    "url", ["", "kv.db", "memcached://h:1", "postgresql://u:hunter2@h/db", "sqlite:/x"]
)
async def test_open_kv_rejects_unknown_urls(url: str) -> None:
    with pytest.raises(ValueError) as info:
        await open_kv(url)
    message = str(info.value)
    assert "hunter2" not in message
    assert "sqlite" in message


# --------------------------------------------------------------------------- SQLite specifics


async def test_sqlite_pragmas_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    async with await SqliteKV.open(path) as kv:
        conn = kv._conn

        async def pragma(name: str) -> object:
            rows = list(await conn.execute_fetchall(f"PRAGMA {name}"))
            assert len(rows) == 1
            return rows[0][0]

        assert await pragma("journal_mode") == "wal"
        assert await pragma("busy_timeout") == 5000
        assert await pragma("synchronous") == 1  # NORMAL
        columns = await conn.execute_fetchall("PRAGMA table_info(kv)")
        assert [(c[1], c[2], c[3], c[5]) for c in columns] == [
            ("key", "TEXT", 0, 1),
            ("value", "TEXT", 1, 0),
            ("expires_at", "REAL", 0, 0),
        ]


def _raw_keys(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT key FROM kv")}


async def test_sqlite_expiry_is_exact_to_the_millisecond(tmp_path: Path, clock: FakeClock) -> None:
    async with await SqliteKV.open(tmp_path / "kv.db", clock=clock) as kv:
        await kv.set("k", "v", ttl=10)
        await clock.advance(9.999)
        assert await kv.get("k") == "v"
        assert await kv.scan("k") == {"k": "v"}
        await clock.advance(0.001)
        assert await kv.get("k") is None
        assert await kv.scan("k") == {}
        assert await kv.expire("k", 5) is False


async def test_sqlite_purges_expired_rows_lazily(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "kv.db"
    async with await SqliteKV.open(path, purge_interval=60, clock=clock) as kv:
        await kv.set("old", "v", ttl=1)
        await clock.advance(1)
        assert await kv.get("old") is None
        await kv.set("other", "v")
        # Invisible, but the row is still in the file until a purge runs.
        assert "old" in await asyncio.to_thread(_raw_keys, path)
        await clock.advance(59)
        await kv.set("new", "v")  # the purge interval has passed: this set purges
        assert await asyncio.to_thread(_raw_keys, path) == {"other", "new"}
    async with await SqliteKV.open(path, purge_interval=0, clock=clock) as kv:
        await kv.set("old2", "v", ttl=1)
        await clock.advance(1)
        await kv.set("newer", "v")
        assert await asyncio.to_thread(_raw_keys, path) == {"other", "new", "newer"}


async def test_sqlite_two_connections_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    async with await SqliteKV.open(path) as one, await SqliteKV.open(path) as two:
        await one.set("k", "from one", ttl=30)
        assert await two.get("k") == "from one"
        assert await two.expire("k", 30) is True
        assert await two.delete("k") is True
        assert await one.get("k") is None


async def test_sqlite_closed_store_refuses_work(tmp_path: Path) -> None:
    kv = await SqliteKV.open(tmp_path / "kv.db")
    await kv.close()
    with pytest.raises(RuntimeError):
        await kv.get("k")


@pytest.mark.slow
async def test_sqlite_concurrent_writers_across_processes(tmp_path: Path) -> None:
    """Two other processes and this one write at once; nobody sees 'database is locked'."""
    path = tmp_path / "kv.db"
    count = 300
    async with await SqliteKV.open(path) as kv:
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                str(WORKER),
                "hammer",
                str(path),
                f"w{n}:",
                str(count),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            for n in (1, 2)
        ]
        try:
            for i in range(count):
                await kv.set(f"w0:{i}", str(i), ttl=60)
            results = [await asyncio.wait_for(proc.communicate(), 10) for proc in procs]
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        for proc, (out, err) in zip(procs, results, strict=True):
            assert proc.returncode == 0, err.decode()
            assert out.decode().strip() == f"DONE {count}"
            assert "locked" not in err.decode()
        for n in (0, 1, 2):
            found = await kv.scan(f"w{n}:")
            assert len(found) == count
            assert found[f"w{n}:{count - 1}"] == str(count - 1)
