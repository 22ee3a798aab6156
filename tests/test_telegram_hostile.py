"""Telegram: the allow-list goes before everything, for every kind of update, and a message
refused for its text leaves nothing behind; against the fake Bot API."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fakes.telegram import FakeTelegram
from telegram_rig import Rig, last_task_of, reply_in, running, sent_to, start_rig, stop_rig

from adapters.telegram.adapter import REFUSAL


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def guarded(fake: FakeTelegram, tmp_path: Path) -> AsyncIterator[Rig]:
    """A rig that serves only the group -400 and Ann's private chat 91."""
    async with running(fake, tmp_path / "home", telegram_allowed_chats="-400,91") as started:
        yield started


async def handled_so_far(fake: FakeTelegram, ann: dict[str, Any], tag: str) -> None:
    """Updates are handled in order: once Ann's message after them is answered, the ones
    injected before it were seen."""
    fake.inject_message(fake.private_chat(91), ann, tag)
    await reply_in(fake, 91, f"echo: {tag}")


def service_message(chat: dict[str, Any], user: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "message": {
            "message_id": 77,
            "date": int(time.time()),
            "chat": chat,
            "from": user,
            **fields,
        }
    }


async def test_a_forged_migration_from_a_chat_off_the_list_renames_nothing(
    guarded: Rig,
) -> None:
    fake, store = guarded.fake, guarded.runtime.store
    ann, eve = fake.user(11, "Ann"), fake.user(66, "Eve")
    fake.inject_message(fake.group(-400, "team"), ann, "remember the blue door")
    await handled_so_far(fake, ann, "stored")
    assert await store.get("tg--400") is not None
    evil = fake.supergroup(-1000666, "evil")
    # "This supergroup was the allowed group -400": the allowed chat's session would move.
    fake.inject_update(service_message(evil, eve, migrate_from_chat_id=-400))
    # And the other half of a migration, from a chat off the list.
    fake.inject_update(
        service_message(fake.group(-666, "evil group"), eve, migrate_to_chat_id=-1000666)
    )
    await handled_so_far(fake, ann, "sync")
    assert await store.get("tg--400") is not None
    assert await store.get("tg--1000666") is None
    assert await guarded.runtime.kv.scan("tgalias:") == {}
    assert sent_to(fake, -1000666) == [] and sent_to(fake, -666) == []


async def test_an_allowed_group_stays_allowed_as_a_supergroup(guarded: Rig) -> None:
    fake = guarded.fake
    ann = fake.user(11, "Ann")
    group = fake.group(-400, "team")
    fake.inject_message(group, ann, "/status")
    await reply_in(fake, -400, "session: tg--400")
    fake.inject_message(group, ann, "", migrate_to_chat_id=-1000400)
    fake.inject_message(fake.supergroup(-1000400, "team"), ann, "/status")
    await reply_in(fake, -1000400, "session: tg--1000400")


async def test_a_button_pressed_in_a_chat_off_the_list_is_refused(guarded: Rig) -> None:
    fake = guarded.fake
    ann = fake.user(91, "Ann")
    fake.inject_message(fake.private_chat(91), ann, "!confirm deploy")
    await fake.wait_for_call("sendMessage", lambda p: "reply_markup" in p, timeout=10)
    approve = fake.sent_messages(91)[-1]["reply_markup"]["inline_keyboard"][0][0]
    # The same button data, pressed on a message of a chat the bot does not serve.
    fake.inject_message(fake.private_chat(92), fake.user(92, "Eve"), "hi")
    await reply_in(fake, 92, "not available")
    fake.inject_callback(ann, fake.sent_messages(92)[-1], approve["callback_data"])
    refusal = await fake.wait_for_call("answerCallbackQuery", timeout=10)
    assert refusal["text"] == REFUSAL and refusal.get("show_alert") in (True, "true")
    task = guarded.runtime.router.task(await last_task_of(guarded, "tg-91"))
    assert task.prompt is not None  # still waiting for its answer


async def test_a_message_too_long_is_refused_before_its_file_is_fetched(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    rig = await start_rig(fake, tmp_path / "home", max_message_chars=120)
    try:
        chat, ann = fake.private_chat(151), fake.user(151, "Ann")
        fake.inject_message(chat, ann, "x" * 121, document=("notes.txt", b"hello file"))
        await reply_in(fake, 151, "⚠️ message is 121 characters")
        assert fake.calls_to("getFile") == []
        # Short enough alone, too long with the line that describes its file: fetched, then
        # refused, and the file is gone again.
        fake.inject_message(chat, ann, "y" * 60, document=("notes.txt", b"hello file"))
        await reply_in(fake, 151, "the limit is 120")
        assert fake.calls_to("getFile") != []
        session_dir = rig.runtime.store.files("tg-151").dir
        assert [p for p in session_dir.rglob("*") if p.is_file() and "notes" in p.name] == []
        assert await rig.runtime.store.recent_messages("tg-151") == []
    finally:
        await stop_rig(rig)


async def test_a_lone_surrogate_is_refused_with_a_short_reply(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    rig = await start_rig(fake, tmp_path / "home")
    try:
        chat, ann = fake.private_chat(161), fake.user(161, "Ann")
        fake.inject_message(chat, ann, "broken \udfff text", document=("a.txt", b"data"))
        refusal = await reply_in(fake, 161, "⚠️")
        assert "not valid Unicode" in refusal["text"]
        fake.inject_message(chat, ann, "fine text")  # the handler is still there
        await reply_in(fake, 161, "echo: fine text")
        messages = await rig.runtime.store.recent_messages("tg-161")
        assert [m.content for m in messages if m.role == "user"] == ["fine text"]
        attachments = rig.runtime.store.files("tg-161").dir / "workspace" / "attachments"
        assert not attachments.exists() or list(attachments.iterdir()) == []
    finally:
        await stop_rig(rig)
