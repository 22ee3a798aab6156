"""A KV file SQLite cannot read (it holds only caches and presence) is moved aside at start,
with a warning naming it and where it went, and the gateway serves with an empty one."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import aiohttp
import pytest
from gateway_proc import EXE, Gateway, free_port

from gateway.store.kv import SqliteKV

pytestmark = pytest.mark.slow

GARBAGE = b"this is no database\x00\xff" * 400


def corrupt_past_the_header(path: Path) -> None:
    """A real KV file whose pages after the header are overwritten: it opens, then fails."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL)")
    rows = [(f"k{i}", "v" * 500) for i in range(200)]
    conn.executemany("INSERT INTO kv VALUES (?, ?, NULL)", rows)
    conn.commit()
    conn.close()
    with path.open("r+b") as file:
        file.seek(4096 * 2)
        file.write(GARBAGE)


@pytest.mark.parametrize("damage", ["garbage", "pages"])
async def test_a_gateway_starts_over_an_unreadable_kv_file(tmp_path: Path, damage: str) -> None:
    home = tmp_path / "home"
    kv_file = home / ".store" / "kv.db"
    kv_file.parent.mkdir(parents=True)
    if damage == "garbage":
        kv_file.write_bytes(GARBAGE)
    else:
        corrupt_past_the_header(kv_file)
    gateway = Gateway(home, free_port())
    try:
        await gateway.start()
        warned = [e for e in gateway.log if e.get("path") == str(kv_file)]
        assert len(warned) == 1, gateway.log[-10:]
        aside = Path(str(warned[0]["moved_to"]))
        assert aside.name.startswith("kv.db.corrupt-") and aside.parent == kv_file.parent
        assert GARBAGE in await asyncio.to_thread(aside.read_bytes)  # kept, not deleted
        assert warned[0]["level"] == "warning"

        env = {
            **os.environ,
            "AGENVOY_HOME": str(home),
            "AGENVOY_HTTP_PORT": str(gateway.port),
            "NO_PROXY": "127.0.0.1,localhost",
        }
        command = await asyncio.create_subprocess_exec(
            EXE, "send", "hello", env=env, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(command.communicate(), 30)
        assert (command.returncode, out.decode().strip()) == (0, "echo: hello")
        async with aiohttp.ClientSession() as http, http.get(f"{gateway.url}/healthz") as resp:
            assert resp.status == 200, await resp.text()
        assert await gateway.stop() == 0
    finally:
        await gateway.close()
    # The new file is a working store.
    kv = await SqliteKV.open(kv_file)
    try:
        await kv.set("k", "v")
        assert await kv.get("k") == "v"
    finally:
        await kv.close()


async def test_a_kv_file_that_cannot_be_reached_is_left_where_it_is(tmp_path: Path) -> None:
    """Not being able to open a file (a folder in its place) is no reason to move it."""
    kv_file = tmp_path / "kv.db"
    kv_file.mkdir()
    with pytest.raises(sqlite3.OperationalError):
        await SqliteKV.open(kv_file)
    assert kv_file.is_dir()
    assert await asyncio.to_thread(lambda: list(tmp_path.iterdir())) == [kv_file]
