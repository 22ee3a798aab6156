"""/export_me in a chat hands the member the whole document as a file, only where they alone
see it: the ephemeral answer to the Discord slash command, their private chat with the
Telegram bot (asked in a group, it goes there, or the group is told how to let the bot write
to them). Driven through the fake Discord and Telegram servers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from discord_rig import ANN, GENERAL, INTERACTION_CALLBACK, general_only
from discord_rig import start_rig as discord_start
from discord_rig import stop_rig as discord_stop
from fakes.base import Upload
from fakes.telegram import FakeTelegram
from support import wait_until
from telegram_rig import running, sent_to

EPHEMERAL = 64
GROUP = -4001
NOT_STARTED = "Forbidden: bot can't initiate conversation with a user"


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


def exported(upload: Any) -> dict[str, Any]:
    assert isinstance(upload, Upload) and upload.filename, upload
    assert upload.filename.startswith("agenvoy-export-") and upload.filename.endswith(".json")
    document: dict[str, Any] = json.loads(upload.data)
    return document


def is_export(params: dict[str, Any]) -> bool:
    return str(params.get("text", "")).startswith("Stored about")


async def test_in_a_private_telegram_chat_the_document_comes_there(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    async with running(fake, tmp_path / "home"):
        chat, user = fake.private_chat(71), fake.user(71, "Ann")
        fake.inject_message(chat, user, "remember the blue door")
        await fake.wait_for_call("sendMessage", lambda p: "blue door" in str(p.get("text")))
        fake.inject_message(chat, user, "/export_me")
        sent = await fake.wait_for_call("sendDocument", timeout=10)
        assert int(sent["chat_id"]) == 71
        document = exported(sent["document"])
        assert document["identity"] == "telegram:71"
        assert [m["content"] for m in document["messages"]][:1] == ["remember the blue door"]
        assert any(text.startswith("Stored about telegram:71") for text in sent_to(fake, 71))


async def test_asked_in_a_group_the_document_goes_to_the_private_chat(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    async with running(fake, tmp_path / "home"):
        group, user = fake.group(GROUP, "Team"), fake.user(72, "Bo")
        fake.inject_message(group, user, "/export_me")
        sent = await fake.wait_for_call("sendDocument", timeout=10)
        assert int(sent["chat_id"]) == 72  # the member's private chat, not the group
        assert exported(sent["document"])["identity"] == "telegram:72"

        async def told() -> bool:
            return "Sent to you in our private chat." in sent_to(fake, GROUP)

        assert await wait_until(told, 10)
        assert not any(m.get("document") for m in fake.sent_messages(GROUP))


async def test_a_member_who_never_started_the_bot_is_told_how_to_get_it(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    async with running(fake, tmp_path / "home"):
        fake.fail_next("sendDocument", 403, NOT_STARTED)
        group, user = fake.group(GROUP, "Team"), fake.user(73, "Cy")
        fake.inject_message(group, user, "/export_me")
        await fake.wait_for_call("sendDocument", timeout=10, ok=False)

        async def told() -> bool:
            return any("press Start" in text for text in sent_to(fake, GROUP))

        assert await wait_until(told, 10)
        [advice] = [text for text in sent_to(fake, GROUP) if "press Start" in text]
        assert "/export_me" in advice and "private chat" in advice
        assert fake.sent_messages(73) == []


async def test_the_discord_slash_command_answers_with_the_file_for_the_member_alone(
    tmp_path: Path,
) -> None:
    async with general_only() as fake:
        rig = await discord_start(fake, tmp_path / "home")
        try:
            fake.inject_message(GENERAL, ANN, "the green lamp", mentions_bot=True)
            await fake.wait_for_call(
                "POST /channels/{id}/messages", lambda b: "green lamp" in str(b.get("content"))
            )
            fake.inject_command(ANN, GENERAL, "export_me")
            answer = await fake.wait_for_call(
                INTERACTION_CALLBACK, lambda b: b.get("type") == 4, timeout=10
            )
            assert answer["data"]["flags"] & EPHEMERAL
            assert answer["data"]["content"].startswith(f"Stored about discord:{ANN['id']}")
            [upload] = [u for u in fake.uploads if (u.filename or "").endswith(".json")]
            document = exported(upload)
            assert document["identity"] == f"discord:{ANN['id']}"
            assert "the green lamp" in [m["content"] for m in document["messages"]]
            # Nothing of it is posted in the channel for the others to see.
            assert fake.ephemeral_responses[-1]["content"] == answer["data"]["content"]
        finally:
            await discord_stop(rig)
