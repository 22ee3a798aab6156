"""Claude Code's permission requests, asked in the chat that started the task: a Write the
real CLI (and the fake one) wants to run waits for the requester's answer in a Telegram group
or a Discord channel, runs once approved and is refused when denied."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from claude_rig import Cli, claude, start, workspace
from discord_rig import ANN as DISCORD_ANN
from discord_rig import BOB as DISCORD_BOB
from discord_rig import GENERAL, GUILD, custom_ids, prompt_in
from discord_rig import Rig as DiscordRig
from discord_rig import reply_in as discord_reply_in
from discord_rig import start_rig as start_discord
from discord_rig import stop_rig as stop_discord
from fakes.anthropic import Text, ToolUse
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel
from fakes.telegram import FakeTelegram
from mcp_rig import stdio_server, write_config
from telegram_rig import Rig, last_task_of, reply_in, start_rig, stop_rig
from test_claude_code_agent import ANN

from gateway.events import Inbound

__all__ = ["claude"]  # the fixture, parametrized over the fake CLI and the real one


@pytest.fixture
async def telegram(claude: Cli, tmp_path: Path) -> AsyncIterator[Rig]:
    async with FakeTelegram() as fake:
        rig = await start_rig(fake, tmp_path / "home", **claude.options())
        rig.runtime.engine.runner.after_task.clear()
        try:
            yield rig
        finally:
            await stop_rig(rig)


async def ask_to_write(claude: Cli, rig: Rig, chat: int) -> tuple[dict[str, Any], Path]:
    """Ann asks the bot in group `chat` for a Write; returns the prompt it posts, and the file."""
    fake = rig.fake
    group = fake.group(chat, "ops")
    ann = fake.user(41, "Ann")
    notes = workspace(rig.runtime, f"tg-{chat}") / "notes.txt"
    claude.script(
        ToolUse([("toolu_w", "Write", {"file_path": str(notes), "content": "hello\n"})]),
        Text("wrote it"),
    )
    fake.inject_message(group, ann, f"@{fake.bot_user['username']} !write notes please")
    prompt = await fake.wait_for_call(
        "sendMessage", lambda p: "reply_markup" in p and p.get("chat_id") == chat, timeout=30
    )
    assert "Write" in prompt["text"] and "notes.txt" in prompt["text"]
    assert not notes.exists()  # nothing ran before the answer
    return prompt, notes


def button(prompt: dict[str, Any], text: str) -> str:
    buttons = prompt["reply_markup"]["inline_keyboard"][0]
    return str(next(b for b in buttons if b["text"] == text)["callback_data"])


async def test_write_asks_in_the_group_and_runs_once_approved(claude: Cli, telegram: Rig) -> None:
    fake = telegram.fake
    prompt, notes = await ask_to_write(claude, telegram, -300)
    posted = fake.sent_messages(-300)[-1]
    # Someone else in the group cannot approve it; the requester can.
    fake.inject_callback(fake.user(42, "Bob"), posted, button(prompt, "Approve"))
    refusal = await fake.wait_for_call("answerCallbackQuery", timeout=10)
    assert "Ann" in refusal["text"] and not notes.exists()
    fake.inject_callback(fake.user(41, "Ann"), posted, button(prompt, "Approve"))
    await reply_in(fake, -300, "wrote it" if claude.real else "echo:", within=30)
    task = await telegram.runtime.router.wait(await last_task_of(telegram, "tg--300"), 10)
    assert task.status == "done" and notes.read_text() == "hello\n"


async def test_write_denied_in_the_group_is_refused(claude: Cli, telegram: Rig) -> None:
    fake = telegram.fake
    prompt, notes = await ask_to_write(claude, telegram, -301)
    claude.script(Text("as you wish"))
    posted = fake.sent_messages(-301)[-1]
    fake.inject_callback(fake.user(41, "Ann"), posted, button(prompt, "Deny"))
    await reply_in(fake, -301, "wrote it" if claude.real else "echo:", within=30)
    assert not notes.exists()
    task = await telegram.runtime.router.wait(await last_task_of(telegram, "tg--301"), 10)
    (result,) = [e for e in task.events if e.kind == "tool_result"]
    assert (result.tool, result.status) == ("Write", "error")
    assert "denied" in result.result


@pytest.fixture
async def discord(claude: Cli, tmp_path: Path) -> AsyncIterator[DiscordRig]:
    async with FakeDiscord() as fake:
        fake.add_guild(
            GUILD,
            "guild",
            channels=[text_channel(GENERAL, "general")],
            members=[DISCORD_ANN, DISCORD_BOB],
        )
        with point_discord_py_at(fake):
            rig = await start_discord(fake, tmp_path / "home", **claude.options())
            rig.runtime.engine.runner.after_task.clear()
            try:
                yield rig
            finally:
                await stop_discord(rig)


async def test_write_asks_in_the_discord_channel_and_runs_once_approved(
    claude: Cli, discord: DiscordRig
) -> None:
    fake = discord.fake
    notes = workspace(discord.runtime, f"dc-{GENERAL}") / "notes.txt"
    claude.script(
        ToolUse([("toolu_w", "Write", {"file_path": str(notes), "content": "hello\n"})]),
        Text("wrote it"),
    )
    fake.inject_message(GENERAL, DISCORD_ANN, "!write notes please", mentions_bot=True)
    prompt = await prompt_in(fake, GENERAL)
    assert "Write" in prompt["content"] and not notes.exists()
    approve = next(cid for cid in custom_ids(prompt) if cid.endswith(":y"))
    fake.inject_component(DISCORD_BOB, prompt, approve)  # not his to answer
    await fake.wait_for_call(
        "POST /interactions/{id}/{token}/callback", lambda b: b.get("type") == 4, timeout=10
    )
    assert not notes.exists()
    fake.inject_component(DISCORD_ANN, prompt, approve)
    await discord_reply_in(fake, GENERAL, "wrote it" if claude.real else "echo:", within=30)
    task = await discord.runtime.router.wait(await last_discord_task(discord), 10)
    assert task.status == "done" and notes.read_text() == "hello\n"


async def test_bash_redirection_denied_in_the_discord_channel_is_refused(
    claude: Cli, discord: DiscordRig
) -> None:
    fake = discord.fake
    out = workspace(discord.runtime, f"dc-{GENERAL}") / "out.txt"
    claude.script(
        ToolUse([("toolu_b", "Bash", {"command": "echo hi > out.txt"})]), Text("left it alone")
    )
    fake.inject_message(GENERAL, DISCORD_ANN, "!redirect into a file", mentions_bot=True)
    prompt = await prompt_in(fake, GENERAL)
    assert "Bash" in prompt["content"] and "out.txt" in prompt["content"]
    deny = next(cid for cid in custom_ids(prompt) if cid.endswith(":n"))
    fake.inject_component(DISCORD_ANN, prompt, deny)
    await discord_reply_in(fake, GENERAL, "left it alone" if claude.real else "echo:", within=30)
    task = await discord.runtime.router.wait(await last_discord_task(discord), 10)
    (result,) = [e for e in task.events if e.kind == "tool_result"]
    assert (result.tool, result.status) == ("Bash", "error")
    assert task.status == "done" and not out.exists()


async def test_a_configured_mcp_tool_is_asked_for_too(claude: Cli, tmp_path: Path) -> None:
    # The configured servers and the permission server go to the CLI together; a tool of the
    # former is asked through the latter, like any other.
    home = tmp_path / "home"
    write_config(home, {"fake": stdio_server(tmp_path / "pids")})
    rt = await start(claude, home)
    rt.engine.runner.after_task.clear()
    try:
        claude.script(ToolUse([("toolu_m", "mcp__fake__add", {"a": 2, "b": 3})]), Text("it is 5"))
        sub = await rt.router.submit(Inbound(ANN, "cli-m", "!mcp add two and three"))
        state = await rt.router.wait(sub.task_hash, 30, until_prompt=True)
        assert state.prompt is not None and state.prompt.tool == "mcp__fake__add"
        assert state.prompt.args == {"a": 2, "b": 3}
        await rt.router.answer("cli-m", sub.task_hash, ANN, approve=True)
        state = await rt.router.wait(sub.task_hash, 30)
        assert state.status == "done", state.error
        (result,) = [e for e in state.events if e.kind == "tool_result"]
        # as the CLI gives it to the model: the structured result, compact
        assert (result.status, result.result) == ("ok", '{"result":"5"}')
    finally:
        await rt.close()


async def last_discord_task(rig: DiscordRig) -> str:
    messages = await rig.runtime.store.recent_messages(f"dc-{GENERAL}", 50)
    return next(m.task_hash for m in reversed(messages) if m.role == "user" and m.task_hash)
