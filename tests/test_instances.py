"""Several real gateway processes on one PostgreSQL database and one Redis: each with its own
home, one owner per session, takeover after SIGKILL, hand-over on SIGTERM.

Which instance ran what, and when, comes from each process's own "task started" / "task
ended" log lines; what was archived and answered comes from the shared archive.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import Backends
from fakes.telegram import FakeTelegram
from gateway_proc import Gateway, free_port
from support import wait_until
from telegram_rig import sent_to

from gateway.settings import Settings
from gateway.store.sessions import SessionStore

pytestmark = pytest.mark.slow

WAIT = 30.0
CHAT = 4242  # the Telegram chat of the poller test
TTL = 3.0  # AGENVOY_LEASE_TTL_SECONDS for these tests


@dataclass
class Cluster:
    tmp_path: Path
    backend: dict[str, str]
    http: aiohttp.ClientSession
    gateways: list[Gateway]

    async def add(self, **env: str) -> Gateway:
        n = len(self.gateways) + 1
        gateway = Gateway(
            self.tmp_path / f"home-{n}",
            free_port(),
            AGENVOY_INSTANCE_ID=f"gw-{n}",
            AGENVOY_LEASE_TTL_SECONDS=str(TTL),
            **self.backend,
        )
        self.gateways.append(gateway)
        await gateway.start(**env)
        return gateway

    async def send(self, gateway: Gateway, session_id: str, text: str) -> str:
        body = {"content": text, "session_id": session_id, "wait": 0}
        async with self.http.post(gateway.url + "/v1/send", json=body) as resp:
            data = await resp.json()
            assert resp.status in (200, 202), data
        return str(data["task_hash"])

    async def archive(self) -> SessionStore:
        url = self.backend["AGENVOY_DATABASE_URL"]
        home = self.tmp_path / "reader"
        return await SessionStore.open(
            Settings(home=home, database_url=url, _env_file=None)  # type: ignore[call-arg]
        )


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    backends = Backends(postgres=True)
    try:
        backend = await backends.new()  # skips (or fails in CI) without PostgreSQL
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as http:
            made = Cluster(tmp_path, backend, http, [])
            try:
                yield made
            finally:
                for gateway in made.gateways:
                    await gateway.close()
    finally:
        await backends.drop()


@dataclass(frozen=True)
class Run:
    session: str
    task: str
    instance: str
    start: float
    end: float  # the moment the instance was killed, for a run it never ended


def runs(gateways: list[Gateway], killed: dict[str, float] | None = None) -> list[Run]:
    """Every task run each instance logged, as intervals."""
    found: list[Run] = []
    for gateway in gateways:
        started: dict[str, dict[str, Any]] = {}
        for entry in gateway.log:
            if entry.get("event") == "task started":
                started[str(entry["task"])] = entry
            elif entry.get("event") == "task ended" and str(entry["task"]) in started:
                begin = started.pop(str(entry["task"]))
                found.append(_run(begin, _at(entry)))
        instance = gateway.env["AGENVOY_INSTANCE_ID"]
        for begin in started.values():  # cut off by a kill
            found.append(_run(begin, (killed or {}).get(instance, time.time())))
    return found


def _run(begin: dict[str, Any], end: float) -> Run:
    return Run(str(begin["session"]), str(begin["task"]), str(begin["instance"]), _at(begin), end)


def _at(entry: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(entry["timestamp"])).timestamp()


def assert_no_overlap(found: list[Run]) -> None:
    by_session: dict[str, list[Run]] = {}
    for run in found:
        by_session.setdefault(run.session, []).append(run)
    for session, session_runs in by_session.items():
        ordered = sorted(session_runs, key=lambda r: r.start)
        for before, after in itertools.pairwise(ordered):
            assert before.end <= after.start, f"{session}: {before} overlaps {after}"


async def answered(store: SessionStore, session_id: str, count: int) -> bool:
    messages = await store.recent_messages(session_id, 1000)
    return sum(1 for m in messages if m.role == "assistant") >= count


async def until(
    check: Callable[[], Awaitable[bool] | bool], what: str, within: float = WAIT
) -> None:
    async def checked() -> bool:
        result = check()
        return await result if inspect.isawaitable(result) else result

    assert await wait_until(checked, within), f"not within {within}s: {what}"


async def assert_answered_once(store: SessionStore, session_id: str, sent: list[str]) -> None:
    """Each message archived once, in the order sent, each answered once, in that order."""
    messages = await store.recent_messages(session_id, 1000)
    users = [m for m in messages if m.role == "user"]
    assert [m.content for m in users] == sent
    replies = [m.task_hash for m in messages if m.role == "assistant"]
    assert replies == [m.task_hash for m in users], "a task answered twice or out of order"
    assert await store.unfinished(session_id) == []


async def test_three_instances_run_each_session_in_order_on_one_instance_at_a_time(
    cluster: Cluster,
) -> None:
    gateways = [await cluster.add() for _ in range(3)]
    sessions = [f"chat-s{i}" for i in range(4)]
    sent: dict[str, list[str]] = {sid: [] for sid in sessions}

    async def talk(index: int, session_id: str) -> None:
        # One message after another per session (each acknowledged before the next), each to
        # another instance; a slow first task keeps the session owned while others arrive.
        for k in range(8):
            text = "!sleep 1" if k == 0 else f"message {k}"
            await cluster.send(gateways[(index + k) % 3], session_id, text)
            sent[session_id].append(text)

    await asyncio.gather(*(talk(i, sid) for i, sid in enumerate(sessions)))
    store = await cluster.archive()
    try:
        for sid in sessions:
            await until(lambda sid=sid: answered(store, sid, 8), f"every task of {sid} answered")  # type: ignore[misc]
        for sid in sessions:
            await assert_answered_once(store, sid, sent[sid])
    finally:
        await store.close()
    found = runs(gateways)
    assert len(found) == 4 * 8  # every task ran once, none twice
    assert_no_overlap(found)
    assert len({run.instance for run in found}) >= 2  # the work was spread


async def test_a_killed_owners_session_is_taken_over_within_the_lease_ttl(
    cluster: Cluster,
) -> None:
    first = await cluster.add()
    second = await cluster.add()
    sid = "chat-takeover"
    slow = await cluster.send(first, sid, "!sleep 2")
    await until(lambda: _logged(first, "task started", slow), "the slow task started on gw-1")
    await cluster.send(second, sid, "after")  # stored by gw-2, handed to gw-1
    killed_at = time.time()
    await first.kill()
    store = await cluster.archive()
    try:
        await until(lambda: answered(store, sid, 2), "both tasks answered after the kill")
        taken_over = time.time() - killed_at
        await assert_answered_once(store, sid, ["!sleep 2", "after"])
    finally:
        await store.close()
    # The slow task ran again in full (2 s) on gw-2: take that from the time it took.
    assert taken_over - 2 < TTL + 3, f"taken over after {taken_over:.1f}s"
    found = runs([first, second], {"gw-1": killed_at})
    assert {(r.instance, r.task) for r in found} >= {("gw-1", slow), ("gw-2", slow)}
    assert_no_overlap(found)


async def test_sigterm_hands_sessions_over_without_waiting_for_the_ttl(cluster: Cluster) -> None:
    slow_env = {"AGENVOY_LEASE_TTL_SECONDS": "60", "AGENVOY_RECOVERY_INTERVAL_SECONDS": "60"}
    first = await cluster.add(**slow_env)
    second = await cluster.add(**slow_env)
    sid = "chat-handover"
    task = await cluster.send(first, sid, "!sleep 2")
    await until(lambda: _logged(first, "task started", task), "the task started on gw-1")
    stopped_at = time.time()
    assert await first.stop() == 0
    # Neither the 60 s TTL nor the 60 s recovery tick: gw-1 said it let the session go.
    await until(lambda: _logged(second, "task started", task), "gw-2 took the task", 10)
    store = await cluster.archive()
    try:
        await until(lambda: answered(store, sid, 1), "the task answered")
        await assert_answered_once(store, sid, ["!sleep 2"])
    finally:
        await store.close()
    assert time.time() - stopped_at < 10


async def _logged(gateway: Gateway, event: str, task: str) -> bool:
    return any(e.get("event") == event and e.get("task") == task for e in gateway.log)


async def test_a_confirmation_asked_on_one_instance_is_answered_on_another(
    cluster: Cluster,
) -> None:
    """The prompt of a task running on gw-1 is listed on gw-2, answered there, and a long poll
    on gw-2 sees the task finish on gw-1."""
    first = await cluster.add()
    second = await cluster.add()
    sid = "chat-confirm"
    task = await cluster.send(first, sid, "!confirm launch")
    await until(lambda: _logged(first, "task started", task), "the task started on gw-1")

    async def listed() -> bool:
        async with cluster.http.get(second.url + "/v1/pending") as resp:
            data = await resp.json()
        return any(p["task_hash"] == task for p in data["pending"])

    await until(listed, "the prompt listed on gw-2")
    route = f"/v1/session/{sid}"
    poll = asyncio.ensure_future(
        cluster.http.get(second.url + f"{route}/task/{task}", params={"wait": "20"})
    )
    async with cluster.http.post(
        second.url + f"{route}/pending/{task}", json={"approve": True}
    ) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["approved"] is True
    async with await poll as resp:
        view = await resp.json()
    assert (view["status"], view["text"]) == ("done", "approved: launch")
    # A second answer, on either instance, finds nothing left to answer.
    for gateway in (first, second):
        async with cluster.http.post(
            gateway.url + f"{route}/pending/{task}", json={"approve": False}
        ) as resp:
            assert resp.status in (404, 409), await resp.text()
    store = await cluster.archive()
    try:
        await assert_answered_once(store, sid, ["!confirm launch"])
    finally:
        await store.close()
    assert {r.instance for r in runs([first, second])} == {"gw-1"}


def _leading(gateway: Gateway, lease: str) -> bool:
    return any(e.get("event") == "leading" and e.get("lease") == lease for e in gateway.log)


async def test_one_instance_polls_telegram_and_another_takes_over_when_it_dies(
    cluster: Cluster,
) -> None:
    async with FakeTelegram() as fake:
        bot = {
            "AGENVOY_TELEGRAM_TOKEN": fake.token,
            "AGENVOY_TELEGRAM_API_URL": fake.url,
            "NO_PROXY": "127.0.0.1,localhost",
        }
        gateways = [await cluster.add(**bot), await cluster.add(**bot)]
        await until(lambda: any(_leading(g, "telegram:poller") for g in gateways), "a leader")
        leader = next(g for g in gateways if _leading(g, "telegram:poller"))
        other = next(g for g in gateways if g is not leader)
        ann = fake.user(CHAT, "Ann")
        fake.inject_message(fake.private_chat(CHAT), ann, "hello")
        await until(lambda: sent_to(fake, CHAT) == ["echo: hello"], "the reply")

        assert not _leading(other, "telegram:poller")  # one poller at a time
        killed_at = time.time()
        await leader.kill()
        fake.inject_message(fake.private_chat(CHAT), ann, "still there?")
        await until(lambda: _leading(other, "telegram:poller"), "the other one polls")
        await until(lambda: len(sent_to(fake, CHAT)) == 2, "the second reply")
        taken_over = time.time() - killed_at
        assert sent_to(fake, CHAT) == ["echo: hello", "echo: still there?"]
        assert taken_over < TTL + 5, f"taken over after {taken_over:.1f}s"
    store = await cluster.archive()
    try:
        await assert_answered_once(store, f"tg-{CHAT}", ["hello", "still there?"])
    finally:
        await store.close()
