"""Redis cut under two gateway instances: requests waiting on a task another instance runs
answer within seconds of the outcome, not at the end of their wait.

Redis sits behind a TCP relay (`tcp_relay`) the test cuts: every connection ends and new ones
are refused, as with a Redis host that went down; PostgreSQL stays up. The signals a task's
end travels on (Redis pub/sub) are lost meanwhile; the archive still has the outcome.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import pytest
from cluster_rig import Cluster, answered, cluster, logged, runs, until
from gateway_proc import Gateway
from support import REDIS_URL
from tcp_relay import Relay

from gateway.bus import RedisBus
from gateway.store.sessions import SessionStore

pytestmark = pytest.mark.slow

__all__ = ["cluster"]  # the fixture

CUT_SECONDS = 6.0
# Beyond the cut: a request in flight across it may take this much longer than the cut itself.
SLACK_SECONDS = 5.0
WAIT_SECONDS = 60  # the `wait` each request asks for: what they all took before the fix


@dataclass
class Sent:
    text: str
    started: float
    status: int = 0
    body: dict[str, Any] | None = None
    took: float = 0.0


@pytest.fixture
async def redis_relay() -> AsyncIterator[tuple[Relay, str]]:
    """A relay in front of the tests' Redis, and the URL that reaches Redis through it."""
    target = urlsplit(REDIS_URL)
    relay = await Relay(target.hostname or "127.0.0.1", target.port or 6379).start()
    relayed = urlunsplit(target._replace(netloc=f"127.0.0.1:{relay.port}"))
    try:
        yield relay, relayed
    finally:
        await relay.close()


async def post(http: aiohttp.ClientSession, gateway: Gateway, sid: str, sent: Sent) -> None:
    body = {"content": sent.text, "session_id": sid, "wait": WAIT_SECONDS}
    async with http.post(gateway.url + "/v1/send", json=body) as resp:
        sent.status, sent.body = resp.status, await resp.json()
    sent.took = time.monotonic() - sent.started


async def archived(store: SessionStore, sid: str, text: str) -> bool:
    return any(m.content == text for m in await store.recent_messages(sid, 1000))


async def test_requests_waiting_across_a_redis_cut_answer_within_seconds(
    cluster: Cluster, redis_relay: tuple[Relay, str]
) -> None:
    relay, relayed = redis_relay
    cluster.backend["AGENVOY_KV_URL"] = relayed
    first = await cluster.add()
    second = await cluster.add()
    sid = "chat-redis-cut"
    # gw-1 owns the session: a slow first task holds it while the others arrive on gw-2.
    slow = await cluster.send(first, sid, "!sleep 3")
    await until(lambda: logged(first, "task started", slow), "the slow task started on gw-1")
    store = await cluster.archive()
    timeout = aiohttp.ClientTimeout(total=WAIT_SECONDS + 30)
    requests: list[asyncio.Task[None]] = []
    sent: list[Sent] = []
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:

            def start(text: str) -> None:
                item = Sent(text, time.monotonic())
                sent.append(item)
                requests.append(asyncio.create_task(post(http, second, sid, item)))

            # In flight across the cut: handed to gw-1 over the bus, it ends during the cut.
            start("before the cut")
            await until(lambda: archived(store, sid, "before the cut"), "the first one stored")
            await relay.cut()
            cut_at = time.monotonic()
            # Stored during the cut by gw-2, which cannot signal gw-1; one after another, so
            # the archive's order is the order sent.
            for k in range(3):
                start(f"during the cut {k}")
                text = f"during the cut {k}"
                await until(lambda text=text: archived(store, sid, text), f"{text!r} stored")  # type: ignore[misc]
            await asyncio.sleep(max(0.0, CUT_SECONDS - (time.monotonic() - cut_at)))
            await relay.restore()
            # After the cut, the bus carries signals again.
            start("after the cut")
            await asyncio.wait_for(asyncio.gather(*requests), WAIT_SECONDS + 20)
        took = {item.text: round(item.took, 1) for item in sent}
        for item in sent:
            assert item.status == 200 and item.body is not None, (item.text, item.body, took)
            assert item.body["status"] == "done", (item.text, item.body, took)
            assert item.body["text"] == f"echo: {item.text}", took
            assert item.took <= CUT_SECONDS + SLACK_SECONDS, f"{item.text!r} waited: {took}"
        # Nothing lost or doubled: each message archived once, in order, each answered once.
        texts = ["!sleep 3", *(item.text for item in sent)]
        await until(lambda: answered(store, sid, len(texts)), "every task answered")
        messages = await store.recent_messages(sid, 1000)
        users = [m for m in messages if m.role == "user"]
        assert [m.content for m in users] == texts
        replies = [m.task_hash for m in messages if m.role == "assistant"]
        assert replies == [m.task_hash for m in users], "a task answered twice or out of order"
        assert await store.unfinished(sid) == []
        found = runs([first, second])
        assert sorted(r.task for r in found) == sorted(str(m.task_hash) for m in users)
    finally:
        for request in requests:
            request.cancel()
        await asyncio.gather(*requests, return_exceptions=True)
        await store.close()


async def test_a_kept_signal_that_met_the_cut_is_sent_once_redis_is_back(
    redis_relay: tuple[Relay, str],
) -> None:
    """A cancel (kept) published during the cut reaches an instance that stayed subscribed once
    Redis is back; a task's step (not kept) is not sent late. Meanwhile the archive is looked
    at in the signals' stead."""
    relay, relayed = redis_relay
    namespace = uuid.uuid4().hex
    sender, listener = RedisBus(relayed, namespace), RedisBus(REDIS_URL, namespace)
    heard: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    looked = asyncio.Event()

    async def ignore(_message: dict[str, Any]) -> None:
        return None

    async def look() -> None:
        looked.set()

    listener.on("cancel", heard.put)
    sender.on("cancel", ignore)
    sender.on_gap(look)
    await listener.start()
    await sender.start()
    try:
        await relay.cut()
        await sender.publish("cancel", {"n": 1}, keep=True)
        await sender.publish("cancel", {"n": 2})
        await asyncio.wait_for(looked.wait(), 5)
        assert heard.empty()
        await relay.restore()
        assert await asyncio.wait_for(heard.get(), 10) == {"n": 1}
        await sender.publish("cancel", {"n": 3})
        assert await asyncio.wait_for(heard.get(), 5) == {"n": 3}
    finally:
        await sender.close()
        await listener.close()
