"""Telegram: nothing is confirmed to Telegram before it is stored, nothing stored twice, and
what a crash can repeat is marked; against the fake Bot API, through python-telegram-bot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from conftest import RelayedDatabase
from fakes.telegram import FakeTelegram
from gateway_proc import free_port
from store_rows import outbox_of_task
from structlog.testing import capture_logs
from support import wait_until
from telegram import Update
from telegram_rig import (
    Rig,
    last_task_of,
    reply_in,
    running,
    sent_to,
    start_rig,
    stop_rig,
)

from adapters.http import start_http
from adapters.telegram import TelegramAdapter
from gateway.adapter import Progress
from gateway.crash import CrashPoints
from gateway.engine.views import Submission
from gateway.events import Inbound, Origin, TextDeltaEvent, TextEvent
from gateway.runtime import Runtime
from gateway.settings import Settings


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def rig(fake: FakeTelegram, tmp_path: Path) -> AsyncIterator[Rig]:
    async with running(fake, tmp_path / "home") as started:
        yield started


class Crashed(Exception):
    pass


class CrashOnce(CrashPoints):
    """Where the real crash points SIGKILL the process, this raises, once, at the n-th time
    `step` is reached: what was written before it stays, nothing after it happens."""

    def __init__(self, step: str, nth: int = 1) -> None:
        super().__init__()
        self.wanted, self.left = step, nth

    def reach(self, step: str) -> None:
        if step == self.wanted:
            self.left -= 1
            if self.left == 0:
                raise Crashed(step)


def fail_submit_once(rig: Rig, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """The next message with `text` fails in the router, as a database outage would."""
    submit = rig.runtime.router.submit
    failed = False

    async def failing(inbound: Inbound, **options: Any) -> Submission:
        nonlocal failed
        if inbound.text == text and not failed:
            failed = True
            raise RuntimeError("the archive is unavailable")
        return await submit(inbound, **options)

    monkeypatch.setattr(rig.runtime.router, "submit", failing)


async def user_texts(rig: Rig, session_id: str) -> list[str]:
    messages = await rig.runtime.store.recent_messages(session_id, 50)
    return [m.content for m in messages if m.role == "user"]


# -- long polling ---------------------------------------------------------------------------------


async def test_an_update_is_confirmed_only_once_its_message_is_archived(rig: Rig) -> None:
    fake = rig.fake
    archived_when_confirmed: list[bool] = []
    confirmed = asyncio.Event()
    update = fake.inject_message(fake.private_chat(11), fake.user(11, "Ann"), "keep me")

    async def on_poll(params: dict[str, Any]) -> None:
        # A getUpdates call with a later offset is what confirms the update to Telegram.
        if int(params.get("offset") or 0) > update["update_id"]:
            archived_when_confirmed.append("keep me" in await user_texts(rig, "tg-11"))
            confirmed.set()

    fake.on_get_updates = on_poll
    await reply_in(fake, 11, "echo: keep me")
    await asyncio.wait_for(confirmed.wait(), 10)
    assert archived_when_confirmed and all(archived_when_confirmed)


async def test_updates_delivered_again_after_a_restart_are_stored_and_answered_once(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    ann, bob = fake.user(11, "Ann"), fake.user(12, "Bob")
    chat, group = fake.private_chat(11), fake.group(-100, "team")
    rig = await start_rig(fake, home)
    chatter = fake.inject_message(group, bob, "just chatting")  # kept as context
    message = fake.inject_message(chat, ann, "only once")
    await reply_in(fake, 11, "echo: only once")
    await stop_rig(rig)
    # A crash after both were stored and before their offset was confirmed: Telegram
    # delivers them again to the next start.
    fake.redeliver(chatter)
    fake.redeliver(message)
    rig = await start_rig(fake, home)
    try:
        fake.inject_message(chat, ann, "after")  # handled after the ones delivered again
        await reply_in(fake, 11, "echo: after")
        assert await user_texts(rig, "tg-11") == ["only once", "after"]
        assert await user_texts(rig, "tg--100") == ["just chatting"]
        assert sent_to(fake, 11) == ["echo: only once", "echo: after"]
    finally:
        await stop_rig(rig)


async def test_a_button_press_delivered_again_is_answered_quietly(rig: Rig) -> None:
    fake = rig.fake
    ann = fake.user(31, "Ann")
    fake.inject_message(fake.private_chat(31), ann, "!confirm deploy")
    await fake.wait_for_call("sendMessage", lambda p: "reply_markup" in p, timeout=10)
    prompt = fake.sent_messages(31)[-1]
    approve = prompt["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    press = fake.inject_callback(ann, prompt, approve)
    await reply_in(fake, 31, "approved: deploy")
    # The same update once more, through the handlers as polling hands it over.
    assert await rig.adapter.handle(Update.de_json(press, rig.adapter.bot))
    again = await fake.wait_for_record(
        "answerCallbackQuery", lambda p: p.get("text") == "already answered", ok=None
    )
    assert not again.data.get("show_alert")
    assert again.status == 400  # Telegram takes one answer per press; the refusal is no failure
    assert sent_to(fake, 31).count("approved: deploy") == 1


async def test_polling_survives_5xx_409_and_429_on_the_runtimes_clock(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    clock = FakeClock()
    rig = await start_rig(fake, tmp_path / "home", clock=clock)
    try:
        fake.fail_next("getUpdates", 502, "Bad Gateway")
        fake.fail_next("getUpdates", 409, "Conflict: terminated by other getUpdates request")
        fake.fail_next("getUpdates", 429, retry_after=7)
        fake.inject_message(fake.private_chat(201), fake.user(201, "Ann"), "still there?")
        waits = []
        for _ in range(3):  # each failure is waited out on the test's clock, not in real time
            waits.append(await clock.next_sleep(under=31))
            await clock.advance(waits[-1])
        await reply_in(fake, 201, "echo: still there?")
        assert waits[2] == 7.0  # as long as Telegram asked
        assert 0 < waits[0] < waits[1] < 1  # backoff (the rig's first wait is 0.01 s)
        failed = [
            c.status for c in fake.call_log if c.method == "getUpdates" and c.answered and not c.ok
        ]
        assert failed == [502, 409, 429]
    finally:
        await stop_rig(rig)


async def test_an_update_whose_handler_fails_is_confirmed_and_polling_goes_on(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = rig.fake
    ann, chat = fake.user(41, "Ann"), fake.private_chat(41)
    fail_submit_once(rig, monkeypatch, "poison")
    poison = fake.inject_message(chat, ann, "poison")
    after = fake.inject_message(chat, ann, "next one")
    await reply_in(fake, 41, "echo: next one")
    await fake.wait_for_call(
        "getUpdates", lambda p: int(p.get("offset") or 0) > after["update_id"], ok=None
    )
    assert poison["update_id"] not in [u["update_id"] for u in fake.pending_updates()]
    assert await user_texts(rig, "tg-41") == ["next one"]


# -- webhook --------------------------------------------------------------------------------------

SECRET = "s3cret_value"


@pytest.fixture
async def hooked(fake: FakeTelegram, tmp_path: Path) -> AsyncIterator[tuple[Rig, str]]:
    """A rig in webhook mode behind the gateway's HTTP server; yields it and the hook's URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/tg-hook"
    settings = Settings(
        home=tmp_path / "home",
        telegram_token=fake.token,
        telegram_api_url=fake.url,
        telegram_mode="webhook",
        telegram_webhook_url=url,
        telegram_webhook_secret=SECRET,
        api_token="api-token",
        _env_file=None,
    )
    runtime = await Runtime.start(settings)
    runtime.engine.courier.initial_wait = 0.01
    adapter = TelegramAdapter.build(runtime)
    runtime.http_routes.extend(adapter.routes())
    http = await start_http(runtime, port=port)
    try:
        await adapter.start()
        yield Rig(fake, runtime, adapter), url
    finally:
        await adapter.stop()
        await http.cleanup()
        await runtime.close()


def update_from(chat_id: int, text: str, update_id: int = 9001) -> dict[str, Any]:
    """An update as Telegram would post it (not queued in the fake)."""
    person = {"id": chat_id, "is_bot": False, "first_name": "Ann"}
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private", "first_name": "Ann"},
            "from": person,
            "text": text,
        },
    }


async def post(url: str, body: bytes | dict[str, Any]) -> tuple[int, Any]:
    import aiohttp

    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as client:
        options: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
        async with client.post(url, headers=headers, **options) as response:
            content = await response.json() if response.content_type == "application/json" else None
            return response.status, content


async def test_the_webhook_answers_200_only_once_the_message_is_stored(
    hooked: tuple[Rig, str],
) -> None:
    rig, url = hooked
    status, _ = await post(url, update_from(131, "via webhook"))
    assert status == 200
    assert await user_texts(rig, "tg-131") == ["via webhook"]  # stored before the 200
    await reply_in(rig.fake, 131, "echo: via webhook")
    status, _ = await post(url, update_from(131, "via webhook"))  # Telegram posts it again
    assert status == 200
    assert await user_texts(rig, "tg-131") == ["via webhook"]
    assert rig.runtime.router.queue_length("tg-131") == 0  # no second task

    async def idle() -> bool:
        return not rig.runtime.router.is_busy("tg-131")

    assert await wait_until(idle)  # the first task's end is recorded after its reply went out
    assert sent_to(rig.fake, 131) == ["echo: via webhook"]


async def test_the_webhook_answers_500_when_handling_fails_and_takes_the_retry(
    hooked: tuple[Rig, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rig, url = hooked
    fail_submit_once(rig, monkeypatch, "try again")
    status, body = await post(url, update_from(132, "try again"))
    assert status == 500 and body["error"]["code"] == "update_failed"
    assert await user_texts(rig, "tg-132") == []
    status, _ = await post(url, update_from(132, "try again"))
    assert status == 200
    await reply_in(rig.fake, 132, "echo: try again")
    assert await user_texts(rig, "tg-132") == ["try again"]


async def test_a_crash_before_anything_is_stored_leaves_the_update_to_telegram(
    hooked: tuple[Rig, str],
) -> None:
    rig, url = hooked
    rig.runtime.crash = CrashOnce("received")
    status, _ = await post(url, update_from(133, "arrived"))
    assert status == 500  # so Telegram posts it again
    assert await rig.runtime.store.get("tg-133") is None
    status, _ = await post(url, update_from(133, "arrived"))
    assert status == 200
    assert await user_texts(rig, "tg-133") == ["arrived"]


NESTED = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    "body",
    [
        b"[1, 2]",
        b'"x"',
        b"null",
        NESTED,
        b'{"update_id": 1, "message": ' + NESTED + b"}",
        b"not json at all",
        b"\xff\xfe{",
        b"{}",
        b'{"update_id": "1"}',
        b'{"update_id": true}',
        b'{"update_id": 1, "message": 5}',
        b'{"update_id": 1, "message": {"text": "no chat, no id"}}',
    ],
    ids=[
        "list",
        "string",
        "null",
        "deeply-nested",
        "deeply-nested-field",
        "not-json",
        "not-utf8",
        "empty-object",
        "id-not-int",
        "id-bool",
        "message-not-object",
        "message-incomplete",
    ],
)
async def test_the_webhook_refuses_what_is_not_an_update_with_400(
    hooked: tuple[Rig, str], body: bytes
) -> None:
    _, url = hooked
    status, content = await post(url, body)
    assert status == 400
    assert content["error"]["code"] == "bad_json" and content["error"]["message"]


# -- what a crash can repeat ----------------------------------------------------------------------


async def test_a_part_telegram_may_have_taken_before_a_crash_goes_again_marked(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    rig = await start_rig(fake, home)
    rig.runtime.engine.courier.initial_wait = 60  # no retry before the restart
    # The second part is accepted by Telegram, then the process dies before the outbox
    # hears of it.
    rig.runtime.crash = CrashOnce("part_sent", 2)
    ann, chat = fake.user(101, "Ann"), fake.private_chat(101)
    words = [f"w{i}" for i in range(2200)]  # about 11,000 characters: three parts
    fake.inject_message(chat, ann, " ".join(words))
    for _ in range(2):
        await fake.wait_for_call("sendMessage", lambda p: len(str(p.get("text"))) > 1000)
    task_hash = await last_task_of(rig, "tg-101")
    # Part two was recorded as handed over before it went, and never as accepted.
    (entry,) = await outbox_of_task(rig.runtime.store.db, task_hash)
    assert (entry.parts_sent, entry.parts_attempted) == (1, 2)
    await stop_rig(rig)

    rig = await start_rig(fake, home)
    try:
        await rig.runtime.router.recover()
        assert await rig.runtime.engine.courier.redeliver() == 1
        parts = [m["text"] for m in fake.sent_messages(101) if len(m.get("text", "")) > 1000]
        assert len(parts) == 4
        assert parts[2] == "↻ " + parts[1]  # the one that may be a repeat says so
        assert not any(p.startswith("↻") for p in (parts[0], parts[1], parts[3]))
        assert " ".join([parts[0], parts[1], parts[3]]).split() == ["echo:", *words]
    finally:
        await stop_rig(rig)


async def test_a_part_lost_with_its_connection_goes_again_marked(rig: Rig) -> None:
    fake = rig.fake
    # No answer came back: Telegram may have it (a 5xx or 4xx answer would say it has not).
    fake.drop_next("sendMessage", when=lambda p: "echo:" in str(p.get("text")))
    fake.inject_message(fake.private_chat(42), fake.user(42, "Ann"), "flaky line")
    sent = await reply_in(fake, 42, "echo: flaky line")
    assert sent["text"] == "↻ echo: flaky line"


# -- stream previews a crash left -----------------------------------------------------------------

ANN_AT_181 = Origin("telegram", channel_id="181", sender_id="181", sender_name="Ann")


async def test_a_preview_left_by_a_crash_is_deleted_at_the_next_start(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    fake.private_chat(181)
    rig = await start_rig(fake, home)
    delta = TextDeltaEvent(session_id="tg-181", task_hash="t181", text="half a rep")
    await rig.adapter.deliver(ANN_AT_181, delta, Progress())
    preview = fake.sent_messages(181)[-1]
    assert list(await rig.runtime.kv.scan("preview:telegram:")) != []
    await stop_rig(rig)  # the final reply never comes

    rig = await start_rig(fake, home)
    try:
        deleted = await fake.wait_for_call("deleteMessage", timeout=10)
        assert deleted["message_id"] == preview["message_id"]
        assert fake.sent_messages(181) == []
        assert await rig.runtime.kv.scan("preview:") == {}
    finally:
        await stop_rig(rig)


async def test_a_replaced_preview_leaves_no_note(rig: Rig) -> None:
    rig.fake.private_chat(181)
    delta = TextDeltaEvent(session_id="tg-181", task_hash="t181", text="half a rep")
    await rig.adapter.deliver(ANN_AT_181, delta, Progress())
    assert len(await rig.runtime.kv.scan("preview:telegram:")) == 1
    final = TextEvent(session_id="tg-181", task_hash="t181", text="the whole reply")
    await rig.adapter.deliver(ANN_AT_181, final, Progress())
    assert await rig.runtime.kv.scan("preview:") == {}
    assert sent_to(rig.fake, 181) == ["the whole reply"]


async def test_a_reply_delivered_while_the_archive_went_down_is_recorded_once_it_is_back(
    fake: FakeTelegram, tmp_path: Path, relayed_database: RelayedDatabase
) -> None:
    """The database goes down while Telegram takes a reply: the delivery is recorded once the
    database is back, so a restart does not send it again (marked ↻)."""
    relay, relayed = relayed_database.relay, relayed_database.relayed
    home = tmp_path / "home"
    # A lease that outlasts the outage: on a loaded machine the cut can pass a short one, and
    # a session given up with its lease takes the courier's wait to record with it.
    rig = await start_rig(fake, home, database_url=relayed, lease_ttl_seconds=30)
    try:

        async def cut_on_reply(call: Any) -> None:
            if call.method == "sendMessage" and "echo: cut" in str(call.data.get("text")):
                fake.before_answer = None
                await relay.cut()

        fake.before_answer = cut_on_reply
        with capture_logs() as logs:
            fake.inject_message(fake.private_chat(11), fake.user(11, "Ann"), "cut")
            await reply_in(fake, 11, "echo: cut")

            async def waiting() -> bool:  # the courier met the unreachable archive
                return any(e["event"].startswith("delivered, not yet recorded") for e in logs)

            assert await wait_until(waiting, within=15)
        await relay.restore()

        async def recorded() -> bool:
            return await rig.runtime.store.outbox.undelivered() == []

        assert await wait_until(recorded, within=15)
    finally:
        await stop_rig(rig)
    rig = await start_rig(fake, home, database_url=relayed, lease_ttl_seconds=3)
    try:
        fake.inject_message(fake.private_chat(11), fake.user(11, "Ann"), "after")
        await reply_in(fake, 11, "echo: after")
        assert sent_to(fake, 11) == ["echo: cut", "echo: after"]  # nothing sent again
    finally:
        await stop_rig(rig)


async def test_a_button_pressed_while_the_archive_is_down_is_answered_once_it_is_back(
    fake: FakeTelegram, tmp_path: Path, relayed_database: RelayedDatabase
) -> None:
    """An Approve press finds PostgreSQL down: it is not confirmed to Telegram, and once the
    database is back the answer is recorded and the task goes on, once."""
    relay, relayed = relayed_database.relay, relayed_database.relayed
    # A long lease TTL: the parked task stays here through the short outage.
    rig = await start_rig(fake, tmp_path / "home", database_url=relayed, lease_ttl_seconds=60)
    try:
        chat, ann = fake.private_chat(41), fake.user(41, "Ann")
        fake.inject_message(chat, ann, "!confirm deploy")
        prompt = await fake.wait_for_call("sendMessage", lambda p: "reply_markup" in p, timeout=10)
        approve = next(
            b for b in prompt["reply_markup"]["inline_keyboard"][0] if b["text"] == "Approve"
        )

        async def delivered() -> bool:  # so that the cut finds nothing on its way
            return await rig.runtime.store.outbox.undelivered() == []

        assert await wait_until(delivered, within=10)
        rig.adapter.poller.max_wait = 0.2  # the press is tried again soon once the archive is back
        with capture_logs() as logs:
            await relay.cut()
            press = fake.inject_callback(ann, fake.sent_messages(41)[-1], approve["callback_data"])

            async def met() -> bool:  # the press was handled while the archive was down
                return any(e.get("update_id") == press["update_id"] for e in logs)

            assert await wait_until(met, within=15)
        await relay.restore()
        await reply_in(fake, 41, "approved: deploy", within=30)
        answers = [t for t in sent_to(fake, 41) if t.startswith("approved: deploy")]
        assert answers == ["approved: deploy"]
    finally:
        await stop_rig(rig)
