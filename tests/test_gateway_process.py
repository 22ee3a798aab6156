"""The gateway as a real process: `agenvoy run`, killed with SIGKILL mid-task, restarted."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from gateway_proc import EXE, Gateway, free_port

pytestmark = pytest.mark.slow


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    gw = Gateway(tmp_path / "home", free_port())
    try:
        yield gw
    finally:
        await gw.close()


async def test_sigkill_with_a_parked_prompt_then_restart(gateway: Gateway) -> None:
    headers = {"X-Agenvoy-Sender": "ann"}
    await gateway.start()
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.post(
            f"{gateway.url}/v1/send", json={"content": "!confirm launch", "persist": True}
        ) as resp:
            assert resp.status == 202
            parked = await resp.json()
        sid, task = parked["session_id"], parked["task_hash"]

        await gateway.kill()
        ready = await gateway.start()
        assert ready["resumed"] == 1

        async def asked_again() -> list[dict[str, object]]:
            # The resumed task replays up to its prompt in the background; poll until it is
            # there (bounded by the timeout below).
            while True:
                async with http.get(f"{gateway.url}/v1/session/{sid}/pending") as resp:
                    found: list[dict[str, object]] = (await resp.json())["pending"]
                if found:
                    return found
                await asyncio.sleep(0.05)

        prompts = await asyncio.wait_for(asked_again(), 10)
        assert [(p["task_hash"], p["tool"]) for p in prompts] == [(task, "demo_action")]
        async with http.post(
            f"{gateway.url}/v1/session/{sid}/pending/{task}", json={"approve": True}
        ) as resp:
            assert resp.status == 200
        async with http.get(f"{gateway.url}/v1/session/{sid}/task/{task}?wait=10") as resp:
            result = await resp.json()
        assert (result["status"], result["text"]) == ("done", "approved: launch")
        async with http.get(f"{gateway.url}/v1/session/{sid}/history") as resp:
            messages = (await resp.json())["messages"]
        assert [(m["role"], m["content"]) for m in messages] == [
            ("user", "!confirm launch"),
            ("assistant", "approved: launch"),
        ]
    assert await gateway.stop() == 0


async def test_sigterm_shuts_down_cleanly_and_keeps_journals(gateway: Gateway) -> None:
    await gateway.start()
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{gateway.url}/v1/send", json={"content": "!sleep 30", "wait": 0, "persist": True}
        ) as resp:
            running = await resp.json()
        task = f"{gateway.url}/v1/session/{running['session_id']}/task/{running['task_hash']}"

        async def started() -> None:
            while True:
                async with http.get(task) as resp:
                    if (await resp.json())["status"] == "running":
                        return
                await asyncio.sleep(0.02)

        await asyncio.wait_for(started(), 10)
    assert await gateway.stop() == 0
    # The interrupted task's journal is still in the archive, for the next start to take up.
    with sqlite3.connect(gateway.home / ".store" / "history.db") as db:
        kept = db.execute("SELECT task_hash FROM task_journal").fetchall()
    assert kept == [(running["task_hash"],)]


async def test_task_finished_before_a_restart_is_still_known(gateway: Gateway) -> None:
    await gateway.start()
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{gateway.url}/v1/send", json={"content": "remember me", "persist": True}
        ) as resp:
            done = await resp.json()
        assert await gateway.stop() == 0
        await gateway.start()
        url = f"{gateway.url}/v1/session/{done['session_id']}/task/{done['task_hash']}"
        async with http.get(url) as resp:
            assert resp.status == 200
            body = await resp.json()
        assert (body["status"], body["text"]) == ("done", "echo: remember me")
        async with http.get(f"{gateway.url}/v1/session/{done['session_id']}/task/nope") as resp:
            assert resp.status == 404
    assert await gateway.stop() == 0


async def test_a_second_gateway_on_the_same_home_is_refused(
    gateway: Gateway, tmp_path: Path
) -> None:
    await gateway.start()
    second = await asyncio.create_subprocess_exec(
        EXE,
        "run",
        env={
            **os.environ,
            "AGENVOY_HOME": str(gateway.home),
            "AGENVOY_HTTP_PORT": str(free_port()),
        },
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(second.communicate(), 30)
    assert second.returncode == 2
    assert "another gateway" in err.decode() and "AGENVOY_HOME" in err.decode()
    # The first one goes on serving, and a new home is welcome.
    async with aiohttp.ClientSession() as http, http.get(f"{gateway.url}/healthz") as resp:
        assert resp.status == 200
    other = Gateway(tmp_path / "other-home", free_port())
    await other.start()
    assert await other.stop() == 0


async def test_a_second_gateway_on_the_same_sqlite_database_is_refused(tmp_path: Path) -> None:
    shared = f"sqlite:///{tmp_path / 'shared' / 'history.db'}"
    first = Gateway(tmp_path / "one", free_port(), AGENVOY_DATABASE_URL=shared)
    await first.start()
    try:
        second = await asyncio.create_subprocess_exec(
            EXE,
            "run",
            env={
                **os.environ,
                "AGENVOY_HOME": str(tmp_path / "two"),
                "AGENVOY_HTTP_PORT": str(free_port()),
                "AGENVOY_DATABASE_URL": shared,
            },
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(second.communicate(), 30)
        assert second.returncode == 2
        said = err.decode()
        # It says what to change to run several: PostgreSQL, and Redis next to it.
        assert "SQLite" in said and "AGENVOY_DATABASE_URL=postgresql" in said, said
        assert "AGENVOY_KV_URL=redis" in said
        async with aiohttp.ClientSession() as http, http.get(f"{first.url}/healthz") as resp:
            assert resp.status == 200
    finally:
        await first.close()
