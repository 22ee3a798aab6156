"""A full disk, for real: the gateway's home on a small tmpfs, filled up to the last byte. A
message is refused with 507 storage_full (never a 500), nothing refused is stored, what was
taken in is answered once there is room, /healthz says degraded while there is no room, and
all is well again once space is freed."""

from __future__ import annotations

import asyncio
import errno
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from clock import FakeClock
from gateway_proc import Gateway, free_port
from small_disk import fill
from support import wait_until

from gateway.store.space import RECHECK_SECONDS, Space, StorageFull, is_storage_full


@pytest.fixture
async def gateway(small_disk: Path) -> AsyncIterator[Gateway]:
    gw = Gateway(small_disk / "home", free_port())
    try:
        yield gw
    finally:
        await gw.close()


async def send(
    http: aiohttp.ClientSession, url: str, text: str, wait: float = 10
) -> tuple[int, Any]:
    body = {"content": text, "session_id": "cli-disk", "persist": True, "wait": wait}
    async with http.post(f"{url}/v1/send", json=body) as resp:
        return resp.status, await resp.json()


async def health(http: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with http.get(f"{url}/healthz") as resp:
        return resp.status, await resp.json()


@pytest.mark.slow
async def test_a_full_disk_is_507_and_a_degraded_health_until_space_is_freed(
    gateway: Gateway, small_disk: Path
) -> None:
    """Each message sent while the disk is full is either refused with 507, and nothing of it
    is stored, or taken in — the archive still had room in its write-ahead log — and answered
    once space is freed. Sent until the archive itself has no room."""
    await gateway.start()
    async with aiohttp.ClientSession() as http:
        assert (await send(http, gateway.url, "before"))[0] == 200
        filler = await asyncio.to_thread(fill, small_disk)

        taken: list[str] = []
        refused: list[str] = []
        # Below the queue caps (100): the log has room for a few of these at most.
        while not refused and len(taken) < 90:
            text = f"while full {len(taken)} " + "x" * 12_000
            status, body = await send(http, gateway.url, text, wait=0.1)
            assert status in (202, 507), body
            if status == 507:
                assert body["error"]["code"] == "storage_full"
                refused.append(text)
            else:
                taken.append(text)
        assert refused
        status, body = await health(http, gateway.url)
        assert (status, body["status"], body["checks"]["database"]) == (503, "degraded", "full")
        assert body["error"]["code"] == "storage_full"
        assert not any(e.get("event") == "http request failed" for e in gateway.log)

        await asyncio.to_thread(filler.unlink)  # space is freed; no write is needed to notice

        async def healthy() -> bool:
            return (await health(http, gateway.url))[0] == 200

        assert await wait_until(healthy, 10)
        status, body = await send(http, gateway.url, "after", wait=60)
        assert (status, body["text"]) == (200, "echo: after"), body
        async with http.get(f"{gateway.url}/v1/session/cli-disk/history") as resp:
            messages = (await resp.json())["messages"]
        # What was taken in is answered, in order ("after" may be stored while the replies
        # before it wait for room); nothing of what was refused is there.
        said = [m["content"] for m in messages if m["role"] == "user"]
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        assert said == ["before", *taken, "after"]
        assert replies == ["echo: " + text for text in said]
    assert await gateway.stop() == 0


def test_sqlite_full_through_the_real_driver_is_told_apart(tmp_path: Path) -> None:
    """SQLITE_FULL for real: an archive capped with max_page_count, written past its cap."""
    conn = sqlite3.connect(tmp_path / "capped.db")
    conn.execute("CREATE TABLE t (b BLOB)")
    conn.commit()
    conn.execute("PRAGMA max_page_count = 8")
    with pytest.raises(sqlite3.OperationalError) as raised:
        for _ in range(100):
            conn.execute("INSERT INTO t VALUES (?)", (b"\0" * 4096,))
    conn.close()
    assert is_storage_full(raised.value)
    wrapped = RuntimeError("the write failed")
    wrapped.__cause__ = raised.value
    assert is_storage_full(wrapped)
    assert is_storage_full(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_storage_full(sqlite3.OperationalError("database is locked"))
    assert not is_storage_full(OSError(errno.EACCES, "Permission denied"))


async def test_a_server_archives_mark_lapses() -> None:
    """PostgreSQL's disk is the server's: a mark lapses, and the next write tells again."""
    clock = FakeClock()
    space = Space(server_archive=True, clock=clock)
    with pytest.raises(StorageFull), space.watching():
        raise OSError(errno.ENOSPC, "No space left on device")
    assert not await space.available()
    await clock.advance(RECHECK_SECONDS)
    assert await space.available()
    with space.watching():
        pass
    assert not space.full
