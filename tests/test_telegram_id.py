"""/id on Telegram, against the fake Bot API: the ids the settings need, answered to whoever
may have them — anyone in their private chat with the bot (the chat's id is their own), only
the group's administrators and the gateway admins in a group."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakes.telegram import FakeTelegram
from telegram_rig import Rig, reply_in, running, sent_to

GATEWAY_ADMIN = 83


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with (
        FakeTelegram() as fake,
        running(fake, tmp_path / "home", admins=f"telegram:{GATEWAY_ADMIN}") as started,
    ):
        yield started


async def test_id_in_a_private_chat_answers_the_askers_own_ids(rig: Rig) -> None:
    fake = rig.fake
    fake.inject_message(fake.private_chat(71), fake.user(71, "Ann"), "/id")
    reply = await reply_in(fake, 71, "chat id: 71")
    assert reply["text"].splitlines() == [
        "chat id: 71",
        "your user id: 71",
        "session: tg-71",
        "settings: AGENVOY_TELEGRAM_ALLOWED_CHATS=71, AGENVOY_ADMINS=telegram:71",
    ]


async def test_id_in_a_forum_topic_names_the_topic_for_a_chat_admin(rig: Rig) -> None:
    fake = rig.fake
    forum = fake.supergroup(-1001234, "forum", is_forum=True)
    mod = fake.user(81, "Mod")
    fake.set_admin(-1001234, mod)
    fake.inject_message(forum, mod, "/id", thread_id=5)
    reply = await reply_in(fake, -1001234, "chat id: -1001234")
    assert reply.get("message_thread_id") == 5
    assert reply["text"].splitlines()[:4] == [
        "chat id: -1001234",
        "topic id: 5",
        "your user id: 81",
        "session: tg--1001234_5",
    ]


async def test_id_in_a_group_is_refused_to_a_member_and_answered_to_a_gateway_admin(
    rig: Rig,
) -> None:
    fake = rig.fake
    group = fake.supergroup(-1005678, "group")
    fake.inject_message(group, fake.user(82, "Member"), "/id")
    await reply_in(fake, -1005678, "only an admin may use /id in a group")
    fake.inject_message(group, fake.user(GATEWAY_ADMIN, "Op"), "/id")
    await reply_in(fake, -1005678, f"your user id: {GATEWAY_ADMIN}")
    said = sent_to(fake, -1005678)
    assert [text for text in said if "82" in text] == []  # the member learnt no id


async def test_id_is_in_the_bots_command_menu(rig: Rig) -> None:
    assert "id" in {command["command"] for command in rig.fake.my_commands()}
