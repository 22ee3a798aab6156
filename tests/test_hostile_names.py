"""Names, tool arguments, questions and answers people chose appear in the bots' own prompts
and notices as typed: Telegram HTML escaped, Discord Markdown escaped, and nothing the Discord
bot posts mentions anyone. The real python-telegram-bot and discord.py clients against the fake
servers, which record what the bot sent."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from discord_rig import GENERAL, GUILD, INTERACTION_CALLBACK, custom_ids, prompt_in, running
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel, user
from fakes.telegram import FakeTelegram
from telegram_rig import reply_in
from telegram_rig import running as telegram_running

TG_NAME = '<a href="https://evil.example/">Admin</a> <b>pre-approved</b>'
DC_NAME = "**Admin** [verified](https://evil.example/) @everyone"
DC_ACTION = "**pre-approved** [docs](https://evil.example/) <@123456789012345678> @here"


# ---------------------------------------------------------------------------------- Telegram


async def prompt_sent(telegram: FakeTelegram, chat_id: int) -> tuple[dict[str, Any], Any]:
    """The HTML the bot sent for its latest prompt, and the message as Telegram shows it."""
    sent = await telegram.wait_for_call(
        "sendMessage", lambda p: p.get("chat_id") == chat_id and "reply_markup" in p, 10
    )
    mark = sent["text"][0]  # 🔐 or ❓
    shown = [m for m in telegram.sent_messages(chat_id) if m.get("text", "").startswith(mark)]
    return sent, shown[-1]


async def test_a_telegram_name_in_html_shows_as_typed_in_prompts(
    telegram: FakeTelegram, tmp_path: Path
) -> None:
    async with telegram_running(telegram, tmp_path / "home"):
        eve = telegram.user(66, TG_NAME)
        chat = telegram.private_chat(66, TG_NAME)
        telegram.inject_message(chat, eve, "!confirm <i>launch</i>")
        sent, shown = await prompt_sent(telegram, 66)
        assert sent["parse_mode"] == "HTML"
        assert "<a" not in sent["text"] and "<b>pre-approved" not in sent["text"]
        assert TG_NAME in shown["text"] and "<i>launch</i>" in shown["text"]
        # The one piece of markup is the prompt's own: the tool's name in bold.
        assert [e["type"] for e in shown.get("entities", [])] == ["bold"]
        approve = shown["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        telegram.inject_callback(eve, shown, approve)
        await reply_in(telegram, 66, "approved: &lt;i&gt;launch")

        telegram.inject_message(chat, eve, "!ask what now?")
        sent, shown = await prompt_sent(telegram, 66)
        assert "<a" not in sent["text"] and TG_NAME in shown["text"]
        assert {e["type"] for e in shown.get("entities", [])} == {"italic"}  # "Reply to …"


# ----------------------------------------------------------------------------------- Discord

EVE = user(13, "eve", global_name=DC_NAME)


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[EVE])
        with point_discord_py_at(fake):
            yield fake


def markdown_left(content: str) -> list[str]:
    """The Markdown and mentions Discord would act on in `content`: unescaped `**`, `[`, `](`,
    `@everyone`, `@here` and `<@id>`."""
    found = re.findall(r"(?<!\\)\*\*|(?<!\\)\[|@everyone|@here|<@\d+>", content)
    return [piece for piece in found if piece != "**"] + (
        ["**"] * (len([p for p in found if p == "**"]) - 2)  # the prompt's own bold name
    )


def as_shown(content: str) -> str:
    """What Discord shows of escaped text: the backslashes and zero-width spaces gone."""
    return re.sub(r"\\(.)", r"\1", content).replace("\u200b", "")


async def test_discord_names_and_arguments_show_as_typed_and_mention_nobody(
    discord_fake: FakeDiscord, tmp_path: Path
) -> None:
    fake = discord_fake
    async with running(fake, tmp_path / "home"):
        fake.inject_message(GENERAL, EVE, f"!confirm {DC_ACTION}", mentions_bot=True)
        prompt = await prompt_in(fake, GENERAL)
        content = prompt["content"]
        assert markdown_left(content) == []
        assert DC_NAME in as_shown(content) and DC_ACTION in as_shown(content)
        sent = fake.calls[-1][3] or {}
        assert sent["allowed_mentions"]["parse"] == []

        approve = next(cid for cid in custom_ids(prompt) if cid.endswith(":y"))
        fake.inject_component(EVE, prompt, approve)
        closed = await fake.wait_for_call(
            INTERACTION_CALLBACK, lambda b: b.get("type") == 7, timeout=10
        )
        assert markdown_left(closed["data"]["content"]) == []
        assert f"approved by {DC_NAME}" in as_shown(closed["data"]["content"])
        assert closed["data"]["allowed_mentions"]["parse"] == []
        reply = await fake.wait_for_call(
            f"POST /channels/{GENERAL}/messages",
            lambda b: "approved:" in str(b.get("content", "")),
            timeout=10,
        )
        # The agent's reply is Markdown on purpose; whatever it echoes pings nobody.
        assert reply["allowed_mentions"]["parse"] == []

        fake.inject_message(GENERAL, EVE, f"!ask {DC_ACTION}?", mentions_bot=True)
        question = await fake.wait_for_call(
            f"POST /channels/{GENERAL}/messages",
            lambda b: str(b.get("content", "")).startswith("❓"),
            timeout=10,
        )
        assert markdown_left(question["content"]) == []
        assert f"{DC_NAME}**: {DC_ACTION}?" in as_shown(question["content"])
        assert question["allowed_mentions"]["parse"] == []
