"""The Telegram adapter through the whole gateway, against a fake Bot API on 127.0.0.1."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from fakes.telegram import FakeTelegram
from gateway_proc import free_port
from telegram_rig import (
    Rig,
    last_task_of,
    reply_in,
    running,
    sent_to,
    start_rig,
    stop_rig,
)

from adapters.telegram import TelegramAdapter
from gateway.adapter import Progress
from gateway.events import Origin, ToolCallEvent
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


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def clocked(fake: FakeTelegram, tmp_path: Path, clock: FakeClock) -> AsyncIterator[Rig]:
    """A rig whose runtime runs on `clock`."""
    async with running(fake, tmp_path / "home", clock=clock) as started:
        yield started


async def test_private_chat_gets_an_echo(rig: Rig) -> None:
    ann = rig.fake.user(11, "Ann")
    chat = rig.fake.private_chat(11)
    rig.fake.inject_message(chat, ann, "hello bot")
    await reply_in(rig.fake, 11, "echo: hello bot")
    messages = await rig.runtime.store.recent_messages("tg-11")
    assert [(m.role, m.content, m.sender) for m in messages] == [
        ("user", "hello bot", "Ann"),
        ("assistant", "echo: hello bot", "offline"),
    ]


async def test_an_edited_message_is_kept_as_context_not_answered_again(rig: Rig) -> None:
    ann = rig.fake.user(11, "Ann")
    chat = rig.fake.private_chat(11)
    update = rig.fake.inject_message(chat, ann, "hello bot")
    await reply_in(rig.fake, 11, "echo: hello bot")
    edit = copy.deepcopy(update["message"])
    edit |= {"text": "hello bot, how are you", "edit_date": edit["date"] + 5}
    rig.fake.inject_update({"edited_message": edit})
    # A reply to the edit would come before the next message's: a session answers in order.
    rig.fake.inject_message(chat, ann, "next")
    await reply_in(rig.fake, 11, "echo: next")
    assert [m["text"] for m in rig.fake.sent_messages(11)] == ["echo: hello bot", "echo: next"]
    messages = await rig.runtime.store.recent_messages("tg-11")
    assert [(m.role, m.content) for m in messages] == [
        ("user", "hello bot"),
        ("assistant", "echo: hello bot"),
        ("user", "(edited) hello bot, how are you"),
        ("user", "next"),
        ("assistant", "echo: next"),
    ]


async def test_group_mention_reply_and_chatter(rig: Rig) -> None:
    fake = rig.fake
    group = fake.group(-100, "team")
    ann, bob = fake.user(11, "Ann"), fake.user(12, "Bob")
    fake.inject_message(group, ann, "just chatting among ourselves")
    fake.inject_message(group, bob, f"@{fake.bot_user['username']} what do you think")
    await reply_in(fake, -100, "echo: what do you think")
    messages = await rig.runtime.store.recent_messages("tg--100")
    assert [(m.content, m.sender) for m in messages] == [
        ("just chatting among ourselves", "Ann"),
        ("what do you think", "Bob"),
        ("echo: what do you think", "offline"),
    ]
    replies = [t for t in sent_to(fake, -100) if t.startswith("echo:")]
    assert replies == ["echo: what do you think"]  # the chatter started no task
    # A reply to the bot's message addresses it too.
    bot_message = fake.sent_messages(-100)[-1]
    fake.inject_message(group, ann, "and you again", reply_to=bot_message)
    await reply_in(fake, -100, "echo: and you again")


async def test_ask_with_force_reply(rig: Rig) -> None:
    fake = rig.fake
    chat = fake.private_chat(31)
    ann = fake.user(31, "Ann")
    fake.inject_message(chat, ann, "!ask favourite colour?")
    prompt = await fake.wait_for_call(
        "sendMessage", lambda p: "force_reply" in str(p.get("reply_markup", "")), timeout=10
    )
    assert "favourite colour?" in prompt["text"]
    fake.inject_message(chat, ann, "blue", reply_to=fake.sent_messages(31)[-1])
    await reply_in(fake, 31, "answer: blue")


async def test_delivery_failing_twice_is_delivered_once(rig: Rig) -> None:
    fake = rig.fake
    fake.fail_next("sendMessage", 502, "Bad Gateway")
    fake.fail_next("sendMessage", 502, "Bad Gateway")
    fake.inject_message(fake.private_chat(41), fake.user(41, "Ann"), "persist me")
    await reply_in(fake, 41, "echo: persist me")
    assert sent_to(fake, 41).count("echo: persist me") == 1


async def test_rejected_markup_falls_back_to_plain_text(rig: Rig) -> None:
    fake = rig.fake
    fake.fail_next("sendMessage", 400, "Bad Request: can't parse entities: unsupported tag")
    fake.inject_message(fake.private_chat(61), fake.user(61, "Ann"), "**bold** move")
    sent = await fake.wait_for_call(
        "sendMessage", lambda p: p.get("chat_id") == 61 and "parse_mode" not in p, timeout=10
    )
    assert sent["text"] == "echo: bold move"


async def test_429_is_waited_out_and_nothing_is_lost(rig: Rig) -> None:
    fake = rig.fake
    fake.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
    fake.inject_message(fake.private_chat(71), fake.user(71, "Ann"), "slow down")
    await reply_in(fake, 71, "echo: slow down")
    assert sent_to(fake, 71).count("echo: slow down") == 1


async def test_forum_topics_are_separate_sessions(rig: Rig) -> None:
    fake = rig.fake
    forum = fake.supergroup(-300, "forum", is_forum=True)
    ann = fake.user(81, "Ann")
    fake.inject_message(forum, ann, "/status", thread_id=5)
    fake.inject_message(forum, ann, "/status", thread_id=9)
    first = await reply_in(fake, -300, "session: tg--300_5")
    second = await reply_in(fake, -300, "session: tg--300_9")
    assert first.get("message_thread_id") == 5 and second.get("message_thread_id") == 9


async def test_allowed_chats_refuse_others_once(fake: FakeTelegram, tmp_path: Path) -> None:
    rig = await start_rig(fake, tmp_path / "home", telegram_allowed_chats="-1,91")
    try:
        stranger = fake.private_chat(92)
        user = fake.user(92, "Eve")
        fake.inject_message(stranger, user, "hi")
        fake.inject_message(stranger, user, "hi again")
        fake.inject_message(fake.private_chat(91), fake.user(91, "Ann"), "sync")
        await reply_in(fake, 91, "echo: sync")
        assert len(sent_to(fake, 92)) == 1 and "not available" in sent_to(fake, 92)[0]
        assert await rig.runtime.store.get("tg-92") is None
    finally:
        await stop_rig(rig)


async def test_refusal_is_repeated_after_an_hour(
    fake: FakeTelegram, tmp_path: Path, clock: FakeClock
) -> None:
    rig = await start_rig(fake, tmp_path / "home", clock=clock, telegram_allowed_chats="91")
    try:
        stranger, eve = fake.private_chat(93), fake.user(93, "Eve")
        chat, ann = fake.private_chat(91), fake.user(91, "Ann")

        async def stranger_writes(text: str) -> list[str]:
            fake.inject_message(stranger, eve, text)
            # Updates are handled in order: once Ann has her answer, Eve's message was seen.
            fake.inject_message(chat, ann, f"after {text}")
            await reply_in(fake, 91, f"echo: after {text}")
            return sent_to(fake, 93)

        assert len(await stranger_writes("hi")) == 1
        await clock.advance(3599.0)
        assert len(await stranger_writes("still there?")) == 1
        await clock.advance(1.0)
        refusals = await stranger_writes("an hour later")
        assert len(refusals) == 2 and all("not available" in r for r in refusals)
    finally:
        await stop_rig(rig)


async def test_group_migration_keeps_the_history(rig: Rig) -> None:
    fake = rig.fake
    group = fake.group(-400, "old group")
    ann = fake.user(111, "Ann")
    fake.inject_message(group, ann, "/status")
    await reply_in(fake, -400, "session: tg--400")
    fake.inject_message(group, ann, "remember the blue door")  # context only
    fake.inject_message(group, ann, "", migrate_to_chat_id=-1000400)
    supergroup = fake.supergroup(-1000400, "new supergroup")
    fake.inject_message(supergroup, ann, "/status")
    await reply_in(fake, -1000400, "session: tg--1000400")
    messages = await rig.runtime.store.recent_messages("tg--1000400")
    assert "remember the blue door" in [m.content for m in messages]
    assert await rig.runtime.store.get("tg--400") is None
    assert rig.runtime.store.dirs.path_of("tg--1000400").is_dir()


async def test_send_to_a_migrated_chat_follows_it(rig: Rig) -> None:
    fake = rig.fake
    group = fake.group(-500, "moving")
    ann = fake.user(121, "Ann")
    fake.fail_next(
        "sendMessage",
        400,
        "Bad Request: group chat was upgraded to a supergroup chat",
        migrate_to_chat_id=-1000500,
    )
    fake.supergroup(-1000500, "moved")
    fake.inject_message(group, ann, "/help")
    await reply_in(fake, -1000500, "/status")
    assert await rig.runtime.kv.get("tgalias:-500") == "-1000500"


async def test_webhook_mode(fake: FakeTelegram, tmp_path: Path) -> None:
    import aiohttp

    from adapters.http import start_http

    port = free_port()
    settings = Settings(
        home=tmp_path / "home",
        telegram_token=fake.token,
        telegram_api_url=fake.url,
        telegram_mode="webhook",
        telegram_webhook_url=f"http://127.0.0.1:{port}/tg-hook",
        telegram_webhook_secret="s3cret_value",
        api_token="api-token",
        _env_file=None,
    )
    runtime = await Runtime.start(settings)
    adapter = TelegramAdapter.build(runtime)
    runtime.http_routes.extend(adapter.routes())
    http = await start_http(runtime, port=port)
    try:
        await adapter.start()
        hook = await fake.wait_for_call("setWebhook", timeout=10)
        assert hook["url"].endswith("/tg-hook") and hook["secret_token"] == "s3cret_value"
        fake.inject_message(fake.private_chat(131), fake.user(131, "Ann"), "via webhook")
        await reply_in(fake, 131, "echo: via webhook")
        async with aiohttp.ClientSession() as client:
            async with client.post(
                f"http://127.0.0.1:{port}/tg-hook",
                json={"update_id": 1},
                headers={"X-Telegram-Bot-Api-Secret-Token": "wrong"},
            ) as resp:
                assert resp.status == 403
            async with client.post(f"http://127.0.0.1:{port}/tg-hook", json={}) as resp:
                assert resp.status == 403  # no secret at all
    finally:
        await adapter.stop()
        await http.cleanup()
        await runtime.close()


def test_webhook_mode_needs_url_and_secret() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="WEBHOOK_URL"):
        Settings(telegram_mode="webhook", _env_file=None)
    with pytest.raises(ValidationError, match="WEBHOOK_SECRET"):
        Settings(telegram_mode="webhook", telegram_webhook_url="https://x/hook", _env_file=None)


async def test_command_menu_lists_the_registry(rig: Rig) -> None:
    menu = rig.runtime.commands.menu("telegram")
    listed = rig.fake.my_commands()
    assert listed == [{"command": c.name, "description": c.summary} for c in menu]
    assert {"help", "status", "model", "cancel"} <= {c["command"] for c in listed}
    rig.fake.inject_message(rig.fake.private_chat(211), rig.fake.user(211, "Ann"), "/help")
    help_text = (await reply_in(rig.fake, 211, "Commands:"))["text"]
    assert all(f"/{c['command']}" in help_text for c in listed)  # the menu and /help agree


async def test_start_greets_with_help(rig: Rig) -> None:
    rig.fake.inject_message(rig.fake.private_chat(141), rig.fake.user(141, "Ann"), "/start")
    greeting = await reply_in(rig.fake, 141, "/help")
    assert "Hello" in greeting["text"]


async def test_attachments_are_saved_and_described(rig: Rig) -> None:
    fake = rig.fake
    chat, ann = fake.private_chat(151), fake.user(151, "Ann")
    fake.inject_message(chat, ann, "my notes", document=("notes.txt", b"hello file", "text/plain"))
    reply = await reply_in(fake, 151, "echo: my notes")
    assert "notes.txt" in reply["text"] and "10 bytes" in reply["text"]
    saved = list((rig.runtime.store.files("tg-151").dir / "workspace" / "attachments").iterdir())
    assert [p.read_bytes() for p in saved] == [b"hello file"]
    fake.inject_message(chat, ann, "", photo=b"\x89PNG fake image bytes")
    photo = await reply_in(fake, 151, "image/jpeg")
    assert "photo.jpg" in photo["text"]
    fake.inject_message(chat, ann, "", voice=b"OggS fake opus")
    voice = await reply_in(fake, 151, "audio/ogg")
    assert "voice.ogg" in voice["text"]
    contents = {p.read_bytes() for p in saved[0].parent.iterdir()}
    assert b"OggS fake opus" in contents


async def test_oversized_attachment_is_not_downloaded(fake: FakeTelegram, tmp_path: Path) -> None:
    rig = await start_rig(fake, tmp_path / "home", telegram_max_download_bytes=4)
    try:
        fake.inject_message(
            fake.private_chat(161), fake.user(161, "Ann"), "big", document=("big.bin", b"x" * 50)
        )
        reply = await reply_in(fake, 161, "not downloaded")
        assert "big.bin" in reply["text"]
        assert not (rig.runtime.store.files("tg-161").dir / "workspace").exists()
    finally:
        await stop_rig(rig)


async def test_bot_removed_from_chat_cancels_its_prompt(rig: Rig) -> None:
    fake = rig.fake
    group = fake.group(-600, "gone")
    ann = fake.user(171, "Ann")
    fake.inject_message(group, ann, "/status")
    await reply_in(fake, -600, "session: tg--600")
    fake.fail_next("sendMessage", 403, "Forbidden: bot was kicked from the group chat")
    fake.inject_message(group, ann, f"@{fake.bot_user['username']} !confirm x")
    await fake.wait_for_call("sendMessage", ok=False, timeout=10)
    state = await rig.runtime.router.wait(await last_task_of(rig, "tg--600"), 10)
    assert state.status == "canceled"


ANN_AT_181 = Origin("telegram", channel_id="181", sender_id="181", sender_name="Ann")


async def test_typing_is_sent_at_most_once_every_four_seconds(
    clocked: Rig, clock: FakeClock
) -> None:
    clocked.fake.private_chat(181)
    step = ToolCallEvent(session_id="tg-181", task_hash="t181", call_id="c1", tool="x")
    for _ in range(3):
        await clocked.adapter.deliver(ANN_AT_181, step, Progress())
        await clock.advance(1.0)
    assert len(clocked.fake.calls_to("sendChatAction")) == 1
    await clock.advance(1.0)  # four seconds after the first
    await clocked.adapter.deliver(ANN_AT_181, step, Progress())
    actions = clocked.fake.calls_to("sendChatAction")
    assert len(actions) == 2 and all(a and a["action"] == "typing" for a in actions)


async def test_polling_survives_errors(rig: Rig) -> None:
    fake = rig.fake
    fake.fail_next("getUpdates", 502, "Bad Gateway")
    fake.fail_next("getUpdates", 409, "Conflict: terminated by other getUpdates request")
    fake.inject_message(fake.private_chat(201), fake.user(201, "Ann"), "still there?")
    await reply_in(fake, 201, "echo: still there?")
    failed = [c.status for c in fake.call_log if c.method == "getUpdates" and c.status != 200]
    assert failed[:2] == [502, 409]  # both errors were met, and polling carried on


async def test_long_reply_cut_by_a_restart_goes_on_from_the_next_part(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    rig = await start_rig(fake, home)
    rig.runtime.engine.courier.initial_wait = 60  # after the failure it waits past the restart
    ann = fake.user(101, "Ann")
    chat = fake.private_chat(101)
    words = [f"w{i}" for i in range(2200)]  # about 11,000 characters: three parts
    parts_seen = 0

    def second_part(params: dict[str, Any]) -> bool:
        nonlocal parts_seen
        if len(str(params.get("text", ""))) > 1000:
            parts_seen += 1
        return parts_seen == 2

    fake.fail_next("sendMessage", 500, when=second_part)
    fake.inject_message(chat, ann, " ".join(words))
    await fake.wait_for_call("sendMessage", lambda p: len(str(p.get("text"))) > 1000, ok=False)
    assert len([m for m in fake.sent_messages(101) if len(m.get("text", "")) > 1000]) == 1
    await stop_rig(rig)  # the process goes away with the reply half sent

    rig = await start_rig(fake, home)
    try:
        await rig.runtime.router.recover()
        assert await rig.runtime.engine.courier.redeliver() == 1
        parts = [m["text"] for m in fake.sent_messages(101) if len(m.get("text", "")) > 1000]
        assert len(parts) == 3  # the first part was not sent again
        assert " ".join(parts).split() == ["echo:", *words]
    finally:
        await stop_rig(rig)
