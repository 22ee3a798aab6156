"""A reply Telegram keeps refusing with a 5xx is tried with backoff for hours, across a
restart, and arrives once when Telegram is back; a refusal for good (403) ends it at once.
Time is a FakeClock: a simulated hour takes a second."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from clock import FakeClock
from discord_rig import ANN, GENERAL, general_only
from discord_rig import start_rig as discord_start
from discord_rig import stop_rig as discord_stop
from fakes.telegram import FakeTelegram
from gateway_proc import free_port
from patience import patient
from store_rows import outbox_of_task
from support import wait_until
from telegram_rig import Rig, last_task_of, reply_in, sent_to, start_rig, stop_rig
from test_http import write_tokens

from adapters.http import start_http

HOUR = 3600.0
DOWN_FOR = 50 * 60.0  # Telegram answers 502 to the reply for 50 simulated minutes
BACKOFF_CAP = 301.0  # a sleep shorter than this is a backoff (the courier's cap is 300 s)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


async def started(fake: FakeTelegram, home: Path, clock: FakeClock, **extra: Any) -> Rig:
    write_tokens(home / ".store", {"root": "Root"})  # the console's admin
    rig = await start_rig(
        fake,
        home,
        clock=clock,
        outbox_expiry_seconds=3 * HOUR,
        admins="http:root",
        # Presence refreshes and the lease watchdog sleep longer than any backoff: moving
        # time to the next sleep under the cap is moving it to the courier's next try.
        presence_ttl_seconds=4 * HOUR,
        presence_refresh_seconds=3 * HOUR,
        lease_ttl_seconds=3 * HOUR,
        **extra,
    )
    rig.runtime.engine.courier.initial_wait = 0.5  # the real schedule, on simulated time
    return rig


def the_reply(params: dict[str, Any]) -> bool:
    return str(params.get("text", "")).startswith("echo:")


async def move_time(clock: FakeClock, *, until: float) -> None:
    """Move time to each sleep as it starts (the courier's next try), never past `until`
    (simulated seconds): time moves only while the gateway waits for it, so every try is
    made at the time it was due."""
    while True:
        due = await clock.next_sleep(under=BACKOFF_CAP, within=patient(10))
        if clock.monotonic() + due > until:
            await clock.advance(until - clock.monotonic())
            return
        await clock.advance(due)


def bad_gateways(fake: FakeTelegram) -> int:
    return sum(c.method == "sendMessage" and c.status == 502 for c in fake.call_log)


async def test_a_reply_through_an_hour_of_502s_and_a_restart_arrives_once(
    fake: FakeTelegram, tmp_path: Path, database_url: str
) -> None:
    clock = FakeClock()
    home = tmp_path / "home"
    let_through: list[float] = []  # simulated times the reply reached a working Telegram

    def down(params: dict[str, Any]) -> bool:
        if not the_reply(params):
            return False
        if clock.monotonic() < DOWN_FOR:
            return True
        let_through.append(clock.monotonic())
        return False

    fake.fail_next("sendMessage", 502, "Bad Gateway", times=1_000_000, when=down)
    rig = await started(fake, home, clock, database_url=database_url)
    try:
        fake.inject_message(fake.private_chat(71), fake.user(71, "Ann"), "are you there?")
        # The first burst and the background tries, then the gateway restarts, 20 min in.
        await move_time(clock, until=20 * 60)
        assert bad_gateways(fake) >= 9
        task = await last_task_of(rig, "tg-71")
    finally:
        await stop_rig(rig)

    rig = await started(fake, home, clock, database_url=database_url)
    try:
        (before,) = await outbox_of_task(rig.runtime.store.db, task)
        assert before.status == "pending" and before.attempts >= 9
        assert before.expires_at - before.next_attempt_at > HOUR  # hours left, kept in the row
        assert await rig.runtime.engine.courier.redeliver() == 0  # still 502: waits again
        mover = asyncio.create_task(move_time(clock, until=2 * HOUR))
        try:
            await reply_in(fake, 71, "echo: are you there?", within=patient(20))
        finally:
            mover.cancel()
        # The first try once Telegram is back: no later than one capped wait after.
        assert len(let_through) == 1 and let_through[0] < DOWN_FOR + BACKOFF_CAP + 1, let_through

        async def delivered() -> bool:
            (entry,) = await outbox_of_task(rig.runtime.store.db, task)
            return entry.status == "delivered"

        assert await wait_until(delivered, 10)
        (after,) = await outbox_of_task(rig.runtime.store.db, task)
        # The count went on across the restart (a try the stop cut short is not counted).
        assert after.attempts > before.attempts
        assert bad_gateways(fake) + 1 - after.attempts in (0, 1)
        # Two waits at the cap at most, never a storm: about a dozen tries in the hour.
        assert 12 <= after.attempts <= 30

        # Another simulated hour: nothing more goes out.
        await clock.advance(HOUR)
        assert rig.runtime.engine.courier.waiting() == 0
        assert await rig.runtime.engine.courier.redeliver() == 0
        assert sent_to(fake, 71) == ["echo: are you there?"]
        assert rig.runtime.router.counters["deliveries_failed"] == 0
    finally:
        await stop_rig(rig)


async def test_a_reply_telegram_refuses_with_403_ends_at_once(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    clock = FakeClock()
    rig = await started(fake, tmp_path / "home", clock)
    port = free_port()
    http = await start_http(rig.runtime, "127.0.0.1", port)
    try:
        fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user", when=the_reply)
        fake.inject_message(fake.private_chat(72), fake.user(72, "Ann"), "bye")
        await fake.wait_for_call("sendMessage", the_reply, ok=False, timeout=10)
        task = await last_task_of(rig, "tg-72")

        def logged() -> list[str]:
            records = rig.runtime.store.files("tg-72").action_log.read()
            return [r.body for r in records if r.kind == "error" and r.task_hash == task]

        async def ended() -> bool:  # the last step of ending it: its action.log line
            return bool(logged())

        assert await wait_until(ended, 10)  # no time had to pass
        (item,) = await outbox_of_task(rig.runtime.store.db, task)
        assert item.attempts == 1
        await clock.advance(HOUR)
        replies = [
            c.status for c in fake.call_log if c.method == "sendMessage" and the_reply(c.data)
        ]
        assert replies == [403]  # tried once, never again

        # Visible: in the task's action.log, and counted in /metrics.
        (failed,) = logged()
        assert "refused by telegram" in failed and "blocked by the user" in failed
        assert item.status == "failed"
        base = f"http://127.0.0.1:{port}"
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
        async with aiohttp.ClientSession(base_url=base, cookie_jar=jar) as client:
            root = {"Authorization": "Bearer agv_test-root"}
            async with client.get("/metrics", headers=root) as resp:
                metrics = await resp.text()
            assert "agenvoy_deliveries_failed_total 1.0" in metrics
            # And on the console's page of the session.
            async with client.post("/ui/login", data={"token": "agv_test-root"}) as resp:
                assert resp.status == 200 and resp.url.path == "/ui/"
            async with client.get("/ui/session/tg-72") as resp:
                page = await resp.text()
        shown = page.split("Replies not delivered", 1)[-1].split("</section>", 1)[0]
        assert task in shown and "<strong>failed</strong> after 1 attempt" in shown, page
        assert "blocked by the user" in shown
    finally:
        await http.cleanup()
        await stop_rig(rig)


async def test_a_reply_discord_refuses_with_403_ends_at_once(tmp_path: Path) -> None:
    async with general_only() as fake:
        rig = await discord_start(fake, tmp_path / "home", clock=FakeClock())
        try:
            fake.fail_next(
                "POST /channels/{id}/messages",
                403,
                when=lambda body: str(body.get("content", "")).startswith("echo:"),
            )
            fake.inject_message(GENERAL, ANN, "anyone?", mentions_bot=True)
            session = f"dc-{GENERAL}"

            async def ended() -> bool:  # the last step of ending it: its action.log line
                records = rig.runtime.store.files(session).action_log.read()
                return any(r.kind == "error" and "refused by discord" in r.body for r in records)

            assert await wait_until(ended, 10)
            (entry,) = await rig.runtime.store.outbox.troubled(session)
            assert (entry.status, entry.attempts) == ("failed", 1)
            assert rig.runtime.router.counters["deliveries_failed"] == 1
        finally:
            await discord_stop(rig)
