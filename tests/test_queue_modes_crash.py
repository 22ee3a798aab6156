"""Queue modes across a crash: a real gateway killed (SIGKILL) while a `!sleep` task runs with
messages steered into it or waiting to be collected, then started again, on SQLite and on
PostgreSQL + Redis. What was promised before the kill is what the restart answers: a steered
message by the task that took it, once; a task that was running by a reply of its own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import Backends
from gateway_proc import Gateway, free_port
from support import wait_until

from gateway.settings import Settings
from gateway.store.sessions import SessionStore

pytestmark = pytest.mark.slow

WAIT = 20.0


class Api:
    def __init__(self, gateway: Gateway, http: aiohttp.ClientSession) -> None:
        self.gateway, self.http = gateway, http

    async def send(self, sid: str, text: str) -> dict[str, Any]:
        body = {"session_id": sid, "content": text, "wait": 0}
        async with self.http.post(self.gateway.url + "/v1/send", json=body) as resp:
            assert resp.status < 300, await resp.text()
            return dict(await resp.json())

    async def send_cut_off(self, sid: str, text: str) -> None:
        """Send a message the gateway dies on (its crash point) before it answers."""
        body = {"session_id": sid, "content": text, "wait": 0}
        with contextlib.suppress(aiohttp.ClientError):
            async with self.http.post(self.gateway.url + "/v1/send", json=body) as resp:
                raise AssertionError(f"answered {resp.status}: {await resp.text()}")

    async def task(self, sid: str, task_hash: str) -> dict[str, Any]:
        async with self.http.get(f"{self.gateway.url}/v1/session/{sid}/task/{task_hash}") as resp:
            assert resp.status == 200, await resp.text()
            return dict(await resp.json())

    async def until_status(self, sid: str, task_hash: str, status: str) -> None:
        async def reached() -> bool:
            return bool((await self.task(sid, task_hash))["status"] == status)

        assert await wait_until(reached, WAIT), f"{task_hash} never {status}"


@contextlib.asynccontextmanager
async def gateway_api(
    home: Path, env: dict[str, str], **start: str
) -> AsyncIterator[tuple[Gateway, Api]]:
    gateway = Gateway(home, free_port(), **env)
    await gateway.start(**start)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as http:
            yield gateway, Api(gateway, http)
    finally:
        await gateway.close()


@contextlib.asynccontextmanager
async def archive(home: Path, env: dict[str, str]) -> AsyncIterator[SessionStore]:
    url = env.get("AGENVOY_DATABASE_URL", "")
    store = await SessionStore.open(Settings(home=home, database_url=url, _env_file=None))
    try:
        yield store
    finally:
        await store.close()


async def settled(store: SessionStore, sid: str) -> list[str]:
    """The session's replies once no task is left unfinished."""

    async def idle() -> bool:
        return not await store.unfinished()

    assert await wait_until(idle, WAIT), "tasks left unfinished"
    return [m.content for m in await store.recent_messages(sid, 50) if m.role == "assistant"]


@pytest.mark.parametrize("kill", ["after_collected", "steered"])
async def test_a_steered_message_survives_a_kill(
    tmp_path: Path, backends: Backends, kill: str
) -> None:
    """Killed from outside once the message shows as collected (while the run sleeps on), or by
    itself the moment the message is journaled as the running task's: either way the replayed
    run takes it in again, and nothing else answers it."""
    env, home, sid = await backends.new(), tmp_path / "home", "chat-steered"
    crash = {"AGENVOY_CRASH_AT": "steered"} if kill == "steered" else {}
    async with gateway_api(home, env, **crash) as (gateway, api):
        assert (await api.send(sid, "/queue steer"))["ok"]
        sleeper = (await api.send(sid, "!sleep 4"))["task_hash"]
        await api.until_status(sid, sleeper, "running")
        note = (await api.send(sid, "also this"))["task_hash"]  # 202: taken
        if kill == "steered":
            assert await gateway.died() != 0
        else:
            await api.until_status(sid, note, "collected")
            await gateway.kill()
        await gateway.start()
        async with archive(home, env) as store:
            assert await settled(store, sid) == ["slept 4s; took in: also this"]
        view = await api.task(sid, note)
        assert (view["status"], view["collected_into"]) == ("collected", sleeper)
        await gateway.stop()


async def test_the_task_running_at_a_kill_keeps_its_own_reply(
    tmp_path: Path, backends: Backends
) -> None:
    """`collect` mode: killed right after the second message behind a running task is stored.
    The running task replays with its own reply; the two that waited are collected."""
    env, home, sid = await backends.new(), tmp_path / "home", "chat-collect-kill"
    async with gateway_api(home, env, AGENVOY_CRASH_AT="stored:3") as (gateway, api):
        assert (await api.send(sid, "/queue collect"))["ok"]
        sleeper = (await api.send(sid, "!sleep 2"))["task_hash"]  # stored once
        await api.until_status(sid, sleeper, "running")
        first = (await api.send(sid, "first"))["task_hash"]  # twice
        await api.send_cut_off(sid, "second")  # stored, then the kill
        assert await gateway.died() != 0
        await gateway.start()
        async with archive(home, env) as store:
            assert await settled(store, sid) == ["slept 2s", "echo: second"]
        assert (await api.task(sid, sleeper))["status"] == "done"
        assert (await api.task(sid, first))["status"] == "collected"
        await gateway.stop()


async def replies(store: SessionStore, sid: str) -> list[str]:
    return [m.content for m in await store.recent_messages(sid, 50) if m.role == "assistant"]


async def test_killed_after_collecting_answers_once(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path / "home", free_port())
    sid = "chat-killed"
    try:
        await gateway.start(AGENVOY_CRASH_AT="collected")
        async with aiohttp.ClientSession() as http:

            async def send(text: str) -> dict[str, object]:
                body = {"session_id": sid, "content": text, "wait": 0}
                async with http.post(gateway.url + "/v1/send", json=body) as resp:
                    assert resp.status < 300, await resp.text()
                    return dict(await resp.json())

            assert (await send("/queue collect"))["ok"]
            await send("!sleep 2")
            await send("first")
            await send("second")
        assert await gateway.died() != 0  # killed itself once the two were collected
        await gateway.start()
        settings = Settings(home=tmp_path / "home", _env_file=None)
        store = await SessionStore.open(settings)
        try:

            async def answered() -> bool:
                return len(await replies(store, sid)) >= 2 and not await store.unfinished()

            assert await wait_until(answered, 20)
            assert await replies(store, sid) == ["slept 2s", "echo: second"]
        finally:
            await store.close()
    finally:
        await gateway.close()
