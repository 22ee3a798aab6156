"""An MCP server's tool called by the openai agent (against the fake OpenAI server), with its
confirmation answered in Discord: the real discord.py adapter against the fake Discord."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from discord_rig import ANN, GENERAL, GUILD, Rig, custom_ids, prompt_in, reply_in, running
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel
from fakes.openai import FakeOpenAI, Text, ToolCalls
from mcp_rig import started_pids, stdio_server, wait_gone, write_config

CALLBACK = "POST /interactions/{id}/{token}/callback"


@pytest.fixture
async def discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        server.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[ANN])
        yield server


@pytest.fixture
def pointed(discord: FakeDiscord) -> Iterator[None]:
    with point_discord_py_at(discord):
        yield


@pytest.fixture
def pids(tmp_path: Path) -> Path:
    return tmp_path / "mcp-pids"


@pytest.fixture
async def rig(
    discord: FakeDiscord, pointed: None, model: FakeOpenAI, tmp_path: Path, pids: Path
) -> AsyncIterator[Rig]:
    home = tmp_path / "home"
    write_config(home, {"fake": stdio_server(pids)})
    async with running(discord, home, **model.agent_settings()) as started:
        yield started


async def test_mcp_tool_confirmed_in_discord(rig: Rig, model: FakeOpenAI) -> None:
    discord = rig.fake
    model.script(ToolCalls([("c1", "fake__add", {"a": 2, "b": 40})]), Text("It is 42."))
    discord.inject_message(GENERAL, ANN, "add 2 and 40", mentions_bot=True)
    prompt = await prompt_in(discord, GENERAL)
    assert "fake__add" in str(prompt.get("content", "")) + str(prompt.get("embeds", ""))
    approve = next(cid for cid in custom_ids(prompt) if cid.endswith(":y"))
    discord.inject_component(ANN, prompt, approve)
    edit = await discord.wait_for_call(CALLBACK, lambda b: b.get("type") == 7, timeout=10)
    assert "approved by ann" in edit["data"]["content"]
    await reply_in(discord, GENERAL, "It is 42.")
    tool_turns = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_turns] == ["42"]


async def test_mcp_tool_denied_in_discord_is_not_called(
    rig: Rig, model: FakeOpenAI, pids: Path
) -> None:
    discord = rig.fake
    model.script(ToolCalls([("c1", "fake__crash", {})]), Text("Not crashed."))
    discord.inject_message(GENERAL, ANN, "crash the server", mentions_bot=True)
    prompt = await prompt_in(discord, GENERAL)
    deny = next(cid for cid in custom_ids(prompt) if cid.endswith(":n"))
    discord.inject_component(ANN, prompt, deny)
    await reply_in(discord, GENERAL, "Not crashed.")
    tool_turns = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_turns[0]["content"].startswith("error (denied)")
    (pid,) = started_pids(pids)  # started to list its tools, and still the same process
    assert not await wait_gone(pid, within=0.2)
