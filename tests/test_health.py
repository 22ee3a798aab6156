"""/healthz as a load balancer uses it: 200 while the instance can serve, 503 naming the part it
cannot reach, and an answer within the check timeout even when a part hangs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from conftest import _pg_database, _pg_drop
from sqlalchemy.engine import make_url
from structlog.testing import capture_logs
from support import REDIS_URL, open_redis, wait_until
from tcp_relay import Relay
from test_http import READY, Server, serving

from adapters.http_client import GatewayClient
from gateway.health import CHECK_TIMEOUT_SECONDS, ReadinessProbe
from gateway.leases import LocalLeases
from gateway.store.db import Database
from gateway.store.kv import SqliteKV

# The answer may come this much later than the check timeout (scheduling, the HTTP round trip),
# never as late as a second timeout.
SLACK = 1.0


async def healthz(server: Server) -> tuple[int, Any, float]:
    started = time.monotonic()
    status, body = await server.call("GET", "/healthz")
    return status, body, time.monotonic() - started


@pytest.fixture
async def pg_database() -> AsyncIterator[tuple[str, str]]:
    """An empty PostgreSQL database of this test's own, with Redis there too (skips without)."""
    kv = await open_redis()
    await kv.close()
    url, name = await _pg_database()
    try:
        yield url, name
    finally:
        await _pg_drop(name)


def through(relay: Relay, url: str) -> str:
    return make_url(url).set(host="127.0.0.1", port=relay.port).render_as_string(False)


async def test_an_instance_on_postgresql_and_redis_is_ready(
    tmp_path: Path, pg_database: tuple[str, str]
) -> None:
    url, _ = pg_database
    async with serving(tmp_path, database_url=url, kv_url=REDIS_URL) as srv:
        assert await srv.call("GET", "/healthz") == (200, READY)
        # No token needed, even where one is required for everything else.
        async with srv.client.get(srv.url("/healthz"), headers={"Authorization": ""}) as resp:
            assert resp.status == 200


async def test_a_dropped_database_makes_the_instance_unready(
    tmp_path: Path, pg_database: tuple[str, str]
) -> None:
    url, name = pg_database
    async with serving(tmp_path, database_url=url, kv_url=REDIS_URL) as srv:
        assert (await srv.call("GET", "/healthz"))[0] == 200
        # Every connection to it is terminated, the pool's and the leases' own alike.
        await _pg_drop(name)
        status, body, took = await healthz(srv)
        assert status == 503, body
        assert body == {
            "status": "unavailable",
            "checks": {"database": "unreachable", "kv": "ok", "leases": "unreachable"},
            "platforms": {},
            "error": {
                "code": "unavailable",
                "message": "not ready: database unreachable, leases unreachable",
            },
        }
        assert took < CHECK_TIMEOUT_SECONDS + SLACK
        # Unready is not gone: the terminal client must not start a second gateway on its home.
        async with GatewayClient(srv.base) as client:
            assert await client.healthy()


async def test_a_message_sent_while_the_database_is_gone_is_answered_503(
    tmp_path: Path, pg_database: tuple[str, str]
) -> None:
    url, name = pg_database
    async with serving(tmp_path, database_url=url, kv_url=REDIS_URL) as srv:
        sent = {"content": "hello", "session_id": "cli-down"}
        assert (await srv.call("POST", "/v1/send", json_body=sent))[0] == 200
        await _pg_drop(name)  # its connections end, and new ones are refused
        async with srv.client.post(srv.url("/v1/send"), json=sent) as resp:
            body = await resp.json()
            assert resp.status == 503, body
            assert resp.headers["Retry-After"] == "5"
        assert body["error"]["code"] == "unavailable"
        assert "try again" in body["error"]["message"]
        assert "127.0.0.1" not in body["error"]["message"]  # the server's address stays in the log
        # Reads that go through SQLAlchemy's engine, not the lean pool, say the same.
        for path in ("/v1/search?q=hello", "/v1/sessions", "/v1/usage"):
            async with srv.client.get(srv.url(path)) as resp:
                body = await resp.json()
                assert (resp.status, body["error"]["code"]) == (503, "unavailable"), path


async def test_a_task_that_ends_while_the_database_is_down_is_recorded_once_it_is_back(
    tmp_path: Path, pg_database: tuple[str, str]
) -> None:
    url, _ = pg_database
    target = make_url(url)
    relay = await Relay(target.host or "127.0.0.1", target.port or 0).start()
    try:
        # A long lease TTL: the instance's watchdog keeps out of the short outage.
        stores: dict[str, Any] = {"database_url": through(relay, url), "kv_url": REDIS_URL}
        async with serving(tmp_path, lease_ttl_seconds=60, **stores) as srv:
            sent = {"content": "!sleep 2", "session_id": "cli-down", "wait": 0}
            status, body = await srv.call("POST", "/v1/send", json_body=sent)
            assert status == 202, body
            task = body["task_hash"]

            async def sleeping() -> bool:  # the context read, into the agent's sleep
                view = await srv.call("GET", f"/v1/session/cli-down/task/{task}")
                return any(e.get("kind") == "text_delta" for e in view[1]["events"])

            assert await wait_until(sleeping, within=5)
            with capture_logs() as logs:
                await relay.cut()  # while the agent sleeps: its end meets no database

                async def waiting() -> bool:
                    return any(e["event"].startswith("task ended, not yet recorded") for e in logs)

                assert await wait_until(waiting, within=10)
            await relay.restore()
            status, body = await srv.call("GET", f"/v1/session/cli-down/task/{task}?wait=15")
            outcome = (status, body["status"], body["text"])
            assert outcome == (200, "done", "slept 2s"), body["error"]
            messages = await srv.runtime.store.recent_messages("cli-down", 10)
            assert [(m.role, m.content) for m in messages] == [
                ("user", "!sleep 2"),
                ("assistant", "slept 2s"),
            ]
    finally:
        await relay.close()


@pytest.mark.parametrize("part", ["database", "kv"])
async def test_a_part_that_stops_answering_is_named_within_the_timeout(
    tmp_path: Path, pg_database: tuple[str, str], part: str
) -> None:
    url, _ = pg_database
    redis = make_url(REDIS_URL)
    target = make_url(url) if part == "database" else redis
    relay = await Relay(target.host or "127.0.0.1", target.port or 0).start()
    if part == "database":
        stores: dict[str, Any] = {"database_url": through(relay, url), "kv_url": REDIS_URL}
        hung = {"database", "leases"}  # the leases live on a connection to the same server
    else:
        stores = {"database_url": url, "kv_url": f"redis://127.0.0.1:{relay.port}/{redis.database}"}
        hung = {"kv"}
    expected = {check: "timeout" if check in hung else "ok" for check in READY["checks"]}
    try:
        # A long lease TTL: the instance's own watchdog keeps out of the few frozen seconds.
        async with serving(tmp_path, lease_ttl_seconds=60, **stores) as srv:
            assert await srv.call("GET", "/healthz") == (200, READY)
            relay.freeze()
            for _ in range(2):  # the second probe waits on the checks the first left running
                status, body, took = await healthz(srv)
                assert (status, body["status"], body["checks"]) == (503, "unavailable", expected)
                assert body["error"]["code"] == "unavailable"
                assert all(f"{name} timeout" in body["error"]["message"] for name in hung)
                assert CHECK_TIMEOUT_SECONDS <= took < CHECK_TIMEOUT_SECONDS + SLACK
            relay.thaw()

            async def ready() -> bool:
                return await srv.call("GET", "/healthz") == (200, READY)

            assert await wait_until(ready, within=10)
    finally:
        relay.thaw()
        await relay.close()


async def test_closed_stores_are_unreachable(tmp_path: Path) -> None:
    database = await Database.open(f"sqlite:///{tmp_path / 'history.db'}")
    kv = await SqliteKV.open(tmp_path / "kv.db")
    probe = ReadinessProbe(_pinging(database.ping), _pinging(kv.ping), LocalLeases().healthy)
    try:
        ready = await probe.check()
        assert (ready.ready, ready.database, ready.kv, ready.leases) == (True, "ok", "ok", "ok")
        await database.close()
        await kv.close()
        ready = await probe.check()
        assert (ready.ready, ready.database, ready.kv) == (False, "unreachable", "unreachable")
        assert ready.leases == "ok"
    finally:
        await probe.close()


async def test_a_hung_check_is_asked_once_however_often_the_probe_runs() -> None:
    asked = 0
    release = asyncio.Event()

    async def hangs() -> bool:
        nonlocal asked
        asked += 1
        await release.wait()
        return True

    async def ok() -> bool:
        return True

    probe = ReadinessProbe(hangs, ok, ok, timeout=0.05)
    try:
        for _ in range(3):
            assert (await probe.check()).database == "timeout"
        assert asked == 1
        release.set()
        await asyncio.sleep(0.01)
        # Once it answered, the next probe asks again rather than take its late answer.
        assert (await probe.check()).ready
        assert asked == 2
    finally:
        await probe.close()


async def test_the_document_describes_both_answers(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        _, doc = await srv.call("GET", "/openapi.json")
    operation = doc["paths"]["/healthz"]["get"]
    assert operation["security"] == []
    responses = operation["responses"]
    assert set(responses) == {"200", "421", "503"}
    unavailable = responses["503"]["content"]["application/json"]["schema"]
    assert unavailable == {"$ref": "#/components/schemas/HealthUnavailable"}
    assert f"{CHECK_TIMEOUT_SECONDS:g} s" in operation["description"]


def _pinging(ping: Callable[[], Awaitable[None]]) -> Callable[[], Coroutine[Any, Any, bool]]:
    async def check() -> bool:
        await ping()
        return True

    return check
