"""Several real gateway processes on one PostgreSQL database and one Redis: one owner per
session, takeover after SIGKILL, hand-over on SIGTERM, prompts answered on another instance,
one Telegram poller.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from cluster_rig import (
    TTL,
    Cluster,
    answered,
    assert_answered_once,
    assert_no_overlap,
    cluster,
    leading,
    logged,
    runs,
    until,
)
from fakes.telegram import FakeTelegram
from gateway_proc import free_port
from telegram_rig import sent_to

from gateway.store.actionlog import ActionLog

pytestmark = pytest.mark.slow

__all__ = ["cluster"]  # the fixture

CHAT = 4242  # the Telegram chat of the Telegram tests
WEBHOOK_SECRET = "balanced-secret"


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
    twice = [r for r in found if sum(o.task == r.task for o in found) > 1]
    assert len(found) == 4 * 8, f"every task runs once; these ran more: {twice}"
    assert_no_overlap(found)
    assert len({run.instance for run in found}) >= 2  # the work was spread


async def test_a_killed_owners_session_is_taken_over_within_the_lease_ttl(
    cluster: Cluster,
) -> None:
    first = await cluster.add()
    second = await cluster.add()
    sid = "chat-takeover"
    slow = await cluster.send(first, sid, "!sleep 2")
    await until(lambda: logged(first, "task started", slow), "the slow task started on gw-1")
    after = await cluster.send(second, sid, "after")  # stored by gw-2, handed to gw-1
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
    # Each home's action.log says what happened there: gw-2 took "after" in and ran both, so
    # it has one `user` line, "after"'s; the slow task's is gw-1's (its journal says so).
    log = ActionLog(second.home / "sessions" / sid / "action.log").read()
    assert [r.task_hash for r in log if r.kind == "user"] == [after]
    assert {r.task_hash for r in log if r.kind == "done"} == {slow, after}


async def test_sigterm_hands_sessions_over_without_waiting_for_the_ttl(cluster: Cluster) -> None:
    slow_env = {"AGENVOY_LEASE_TTL_SECONDS": "60", "AGENVOY_RECOVERY_INTERVAL_SECONDS": "60"}
    first = await cluster.add(**slow_env)
    second = await cluster.add(**slow_env)
    sid = "chat-handover"
    task = await cluster.send(first, sid, "!sleep 2")
    await until(lambda: logged(first, "task started", task), "the task started on gw-1")
    stopped_at = time.time()
    assert await first.stop() == 0
    # Neither the 60 s TTL nor the 60 s recovery tick: gw-1 said it let the session go.
    await until(lambda: logged(second, "task started", task), "gw-2 took the task", 10)
    store = await cluster.archive()
    try:
        await until(lambda: answered(store, sid, 1), "the task answered")
        await assert_answered_once(store, sid, ["!sleep 2"])
    finally:
        await store.close()
    # Answered (a 2 s task, run again) in half the TTL, on however loaded a machine.
    assert time.time() - stopped_at < 30


async def test_a_confirmation_asked_on_one_instance_is_answered_on_another(
    cluster: Cluster,
) -> None:
    """The prompt of a task running on gw-1 is listed on gw-2, answered there, and a long poll
    on gw-2 sees the task finish on gw-1."""
    first = await cluster.add()
    second = await cluster.add()
    sid = "chat-confirm"
    task = await cluster.send(first, sid, "!confirm launch")
    await until(lambda: logged(first, "task started", task), "the task started on gw-1")

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
        await until(lambda: any(leading(g, "telegram:poller") for g in gateways), "a leader")
        leader = next(g for g in gateways if leading(g, "telegram:poller"))
        other = next(g for g in gateways if g is not leader)
        ann = fake.user(CHAT, "Ann")
        fake.inject_message(fake.private_chat(CHAT), ann, "hello")
        await until(lambda: sent_to(fake, CHAT) == ["echo: hello"], "the reply")

        assert not leading(other, "telegram:poller")  # one poller at a time
        killed_at = time.time()
        await leader.kill()
        fake.inject_message(fake.private_chat(CHAT), ann, "still there?")
        await until(lambda: leading(other, "telegram:poller"), "the other one polls")
        await until(lambda: len(sent_to(fake, CHAT)) == 2, "the second reply")
        taken_over = time.time() - killed_at
        assert sent_to(fake, CHAT) == ["echo: hello", "echo: still there?"]
        assert taken_over < TTL + 5, f"taken over after {taken_over:.1f}s"
    store = await cluster.archive()
    try:
        await assert_answered_once(store, f"tg-{CHAT}", ["hello", "still there?"])
    finally:
        await store.close()


async def test_an_update_delivered_to_two_webhook_instances_is_handled_once(
    cluster: Cluster,
) -> None:
    """Behind a load balancer, Telegram (or the balancer) may deliver one update to two
    instances: one message archived and answered, one answer to a prompt."""
    async with FakeTelegram() as fake:
        first_port = free_port()
        hook = f"http://127.0.0.1:{first_port}/tg-hook"  # the balancer: the fake posts here
        bot = {
            "AGENVOY_TELEGRAM_TOKEN": fake.token,
            "AGENVOY_TELEGRAM_API_URL": fake.url,
            "AGENVOY_TELEGRAM_MODE": "webhook",
            "AGENVOY_TELEGRAM_WEBHOOK_URL": hook,
            "AGENVOY_TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "NO_PROXY": "127.0.0.1,localhost",
        }
        await cluster.add(first_port, **bot)
        second = await cluster.add(**bot)
        ann = fake.user(CHAT, "Ann")

        async def also_to_second(update: dict[str, Any]) -> None:
            headers = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}
            async with cluster.http.post(
                second.url + "/tg-hook", json=update, headers=headers
            ) as resp:
                assert resp.status == 200, await resp.text()

        await also_to_second(fake.inject_message(fake.private_chat(CHAT), ann, "!confirm go"))
        await until(lambda: any(m.get("reply_markup") for m in fake.sent_messages(CHAT)), "asked")
        prompt = next(m for m in fake.sent_messages(CHAT) if m.get("reply_markup"))
        approve = prompt["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        await also_to_second(fake.inject_callback(ann, prompt, approve))
        await until(lambda: "approved: go" in sent_to(fake, CHAT), "the reply")
        asked = [p for m, p in fake.calls if m == "sendMessage" and "reply_markup" in p]
        assert len(asked) == 1
        assert sent_to(fake, CHAT).count("approved: go") == 1
        # A gateway command, too, is run once.
        await also_to_second(fake.inject_message(fake.private_chat(CHAT), ann, "/status"))
        fake.inject_message(fake.private_chat(CHAT), ann, "after")  # handled after /status
        await until(lambda: "echo: after" in sent_to(fake, CHAT), "the reply after /status")
        assert sum(t.startswith("session: ") for t in sent_to(fake, CHAT)) == 1
    store = await cluster.archive()
    try:
        await assert_answered_once(store, f"tg-{CHAT}", ["!confirm go", "after"])
    finally:
        await store.close()


async def test_hostile_task_ids_on_a_shared_instance_get_clear_errors(cluster: Cluster) -> None:
    """With several instances an unknown task is looked up in the shared journals: an id
    with a NUL, a lone surrogate or 10,000 characters gets a 4xx, never a 500."""
    gateway = await cluster.add()
    route = gateway.url + "/v1/session/chat-h"
    await cluster.send(gateway, "chat-h", "hello")
    for hostile in ("%00", "%ED%A0%80", "a" * 10_000, "0" * 16 + "%00", "..%2F..%2Fetc"):
        for method, path, body in (
            ("GET", f"{route}/task/{hostile}", None),
            ("POST", f"{route}/pending/{hostile}", {"approve": True}),
            ("DELETE", f"{route}/task/{hostile}", None),
        ):
            async with cluster.http.request(method, path, json=body) as resp:
                assert 400 <= resp.status < 500, (method, hostile[:20], resp.status)
