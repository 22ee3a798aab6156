"""A full disk, for real: the gateway's home on a small tmpfs, filled up to the last byte. A
message is refused with 507 storage_full (never a 500), nothing refused is stored, /healthz
says degraded while there is no room, and all is well again once space is freed."""

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


async def send(http: aiohttp.ClientSession, url: str, text: str) -> tuple[int, Any]:
    body = {"content": text, "session_id": "cli-disk", "persist": True, "wait": 10}
    async with http.post(f"{url}/v1/send", json=body) as resp:
        return resp.status, await resp.json()


async def health(http: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with http.get(f"{url}/healthz") as resp:
        return resp.status, await resp.json()


@pytest.mark.slow
async def test_a_full_disk_is_507_and_a_degraded_health_until_space_is_freed(
    gateway: Gateway, small_disk: Path
) -> None:
    await gateway.start()
    async with aiohttp.ClientSession() as http:
        assert (await send(http, gateway.url, "before"))[0] == 200
        filler = await asyncio.to_thread(fill, small_disk)

        refused = []
        for i in range(3):  # a message big enough to need new pages of the archive
            status, body = await send(http, gateway.url, f"while full {i} " + "x" * 12_000)
            assert status == 507, body
            assert body["error"]["code"] == "storage_full"
            refused.append(body)
        status, body = await health(http, gateway.url)
        assert (status, body["status"], body["checks"]["database"]) == (503, "degraded", "full")
        assert body["error"]["code"] == "storage_full"
        assert not any(e.get("event") == "http request failed" for e in gateway.log)

        await asyncio.to_thread(filler.unlink)  # space is freed; no write is needed to notice

        async def healthy() -> bool:
            return (await health(http, gateway.url))[0] == 200

        assert await wait_until(healthy, 10)
        status, body = await send(http, gateway.url, "after")
        assert (status, body["text"]) == (200, "echo: after"), body
        async with http.get(f"{gateway.url}/v1/session/cli-disk/history") as resp:
            messages = (await resp.json())["messages"]
        # Only what was acknowledged is there: nothing of the refused ones.
        assert [(m["role"], m["content"]) for m in messages] == [
            ("user", "before"),
            ("assistant", "echo: before"),
            ("user", "after"),
            ("assistant", "echo: after"),
        ]
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


async def test_without_a_folder_to_probe_the_mark_lapses() -> None:
    """PostgreSQL's disk is the server's: a mark lapses, and the next write tells again."""
    clock = FakeClock()
    space = Space(None, clock=clock)
    with pytest.raises(StorageFull), space.watching():
        raise OSError(errno.ENOSPC, "No space left on device")
    assert not await space.available()
    await clock.advance(RECHECK_SECONDS)
    assert await space.available()
    with space.watching():
        pass
    assert not space.full
