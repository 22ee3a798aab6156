"""Several real gateway processes on one PostgreSQL database and one Redis, each with its own
home: starting them, and reading what they did from their logs and the shared archive.

Which instance ran what, and when, comes from each process's own "task started" / "task
ended" log lines.
"""

from __future__ import annotations

import inspect
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import Backends
from gateway_proc import Gateway, free_port
from support import wait_until

from gateway.settings import Settings
from gateway.store.sessions import SessionStore

WAIT = 30.0
TTL = 3.0  # AGENVOY_LEASE_TTL_SECONDS of every instance


@dataclass
class Cluster:
    tmp_path: Path
    backend: dict[str, str]
    http: aiohttp.ClientSession
    gateways: list[Gateway]

    async def add(self, port: int | None = None, /, **env: str) -> Gateway:
        n = len(self.gateways) + 1
        gateway = Gateway(
            self.tmp_path / f"home-{n}",
            port or free_port(),
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
        return await SessionStore.open(Settings(home=home, database_url=url, _env_file=None))


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
    check: Callable[[], Awaitable[bool] | bool],
    what: str,
    within: float = WAIT,
    *,
    logs_of: Sequence[Gateway] = (),
) -> None:
    """Wait for `check`; a failure shows the last log lines of `logs_of` (what each gateway
    did instead is most of what a failure under load can tell)."""

    async def checked() -> bool:
        result = check()
        return await result if inspect.isawaitable(result) else result

    if await wait_until(checked, within):
        return
    tails = [
        f"{gateway.env.get('AGENVOY_INSTANCE_ID', '?')}:\n"
        + "\n".join(json.dumps(entry) for entry in gateway.log[-25:])
        for gateway in logs_of
    ]
    raise AssertionError(f"not within {within}s: {what}\n" + "\n".join(tails))


async def assert_answered_once(store: SessionStore, session_id: str, sent: list[str]) -> None:
    """Each message archived once, in the order sent, each answered once, in that order."""
    messages = await store.recent_messages(session_id, 1000)
    users = [m for m in messages if m.role == "user"]
    assert [m.content for m in users] == sent
    replies = [m.task_hash for m in messages if m.role == "assistant"]
    assert replies == [m.task_hash for m in users], "a task answered twice or out of order"
    assert await store.unfinished(session_id) == []


async def logged(gateway: Gateway, event: str, task: str) -> bool:
    return any(e.get("event") == event and e.get("task") == task for e in gateway.log)


def leading(gateway: Gateway, lease: str) -> bool:
    return any(e.get("event") == "leading" and e.get("lease") == lease for e in gateway.log)
