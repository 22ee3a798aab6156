"""Subagents beyond the engine: in a Telegram group against the fake Bot API (a confirmation
asked inside a subagent arrives in the parent's chat and is answered there), with the openai
agent's `delegate` tool against the fake model, across a SIGKILL of the gateway, and in the
session listings. Through the router alone: tests/test_subagents.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text, ToolCalls
from fakes.telegram import FakeTelegram
from gateway_proc import Gateway, free_port
from support import wait_until
from telegram_rig import Rig, reply_in, running
from test_openai_agent import start as start_openai
from test_subagents import ask, children_of
from typer.testing import CliRunner

from adapters.terminal.picker import SessionPicker, SessionRow
from gateway.cli import app as cli_app
from gateway.engine.subagents import child_session_id
from gateway.runtime import Runtime
from gateway.settings import Settings


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with FakeTelegram() as fake, running(fake, tmp_path / "home") as started:
        yield started


async def test_a_confirmation_inside_a_subagent_is_asked_in_the_parents_group(rig: Rig) -> None:
    fake = rig.fake
    group = fake.group(-500, "ops")
    ann, bob = fake.user(51, "Ann"), fake.user(52, "Bob")
    fake.inject_message(group, ann, f"@{fake.bot_user['username']} !delegate !confirm deploy")
    prompt = await fake.wait_for_call(
        "sendMessage", lambda p: "reply_markup" in p and p.get("chat_id") == -500, timeout=10
    )
    assert "demo_action" in prompt["text"]
    approve = next(
        b for b in prompt["reply_markup"]["inline_keyboard"][0] if b["text"] == "Approve"
    )
    prompt_message = fake.sent_messages(-500)[-1]
    fake.inject_callback(bob, prompt_message, approve["callback_data"])
    refusal = await fake.wait_for_call("answerCallbackQuery", timeout=10)
    assert "Ann" in refusal["text"]  # only the one who started the parent task, or an admin
    fake.inject_callback(ann, prompt_message, approve["callback_data"])
    await reply_in(fake, -500, "delegated: approved: deploy")
    # The subagent's own reply went to its session, never to the group.
    assert not any(m.get("text") == "approved: deploy" for m in fake.sent_messages(-500))
    (child,) = await children_of(rig.runtime, "tg--500")
    said = [m.content for m in await rig.runtime.store.recent_messages(child)]
    assert said == ["!confirm deploy", "approved: deploy"]


@pytest.fixture
async def fake_model() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


async def test_the_openai_agent_delegates_with_a_tool(
    fake_model: FakeOpenAI, tmp_path: Path
) -> None:
    rt = await start_openai(fake_model, tmp_path / "home")
    try:
        fake_model.script(
            ToolCalls([("d1", "delegate", {"task": "count the files"})]),
            Text("there are none"),  # the subagent's own answer
            Text("The subagent says there are none."),
        )
        sub, state = await ask(rt, "cli-o", "how many files?")
        assert state.status == "done" and state.reply == "The subagent says there are none."
        child = child_session_id(sub.task_hash, "d1")
        assert await children_of(rt, "cli-o") == [child]
        requests = fake_model.requests
        # The subagent started from the task alone, with the same tools.
        child_messages = requests[1]["messages"]
        assert child_messages[-1] == {"role": "user", "content": "parent agent: count the files"}
        assert not any("how many files?" in str(m.get("content")) for m in child_messages)
        assert {t["function"]["name"] for t in requests[1]["tools"]} >= {"delegate", "read_file"}
        tool_reply = requests[2]["messages"][-1]
        assert tool_reply["role"] == "tool" and tool_reply["content"] == "there are none"
    finally:
        await rt.close()


@pytest.mark.slow
async def test_sigkill_while_a_subagent_waits_resumes_both(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path / "home", free_port())
    try:
        await gateway.start()
        async with aiohttp.ClientSession() as http:
            body = {"content": "!delegate !confirm launch", "persist": True}
            async with http.post(f"{gateway.url}/v1/send", json=body) as resp:
                parked = await resp.json()
            assert resp.status == 202 and parked["pending"]["tool"] == "demo_action", parked
            sid, task = parked["session_id"], parked["task_hash"]
            child = child_session_id(task, "#0")

            await gateway.kill()
            await gateway.start()

            async def asked_again() -> bool:
                async with http.get(f"{gateway.url}/v1/session/{sid}/pending") as resp:
                    return bool((await resp.json())["pending"])

            assert await wait_until(asked_again, within=15)
            url = f"{gateway.url}/v1/session/{sid}/pending/{task}"
            async with http.post(url, json={"approve": True}) as resp:
                assert resp.status == 200
            async with http.get(f"{gateway.url}/v1/session/{sid}/task/{task}?wait=15") as resp:
                result = await resp.json()
            assert (result["status"], result["text"]) == ("done", "delegated: approved: launch")
            # One subagent, asked once, answered once.
            async with http.get(f"{gateway.url}/v1/session/{child}/history") as resp:
                said = [(m["role"], m["content"]) for m in (await resp.json())["messages"]]
            assert said == [("user", "!confirm launch"), ("assistant", "approved: launch")]
            async with http.get(f"{gateway.url}/v1/sessions?prefix=temp") as resp:
                temps = [s["session_id"] for s in (await resp.json())["sessions"]]
            assert temps == [child]
        assert await gateway.stop() == 0
    finally:
        await gateway.close()


async def _parent_with_a_subagent(home: Path) -> str:
    rt = await Runtime.start(Settings(home=home, _env_file=None))
    try:
        await ask(rt, "cli-parent", "!delegate hi")
        await rt.store.ensure("cli-other")
        (child,) = await children_of(rt, "cli-parent")
        return child
    finally:
        await rt.close()


def test_listings_show_a_subagent_under_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    child = asyncio.run(_parent_with_a_subagent(home))
    monkeypatch.setenv("AGENVOY_HOME", str(home))
    listed = CliRunner().invoke(cli_app, ["sessions"])
    assert listed.exit_code == 0, listed.output
    lines = [line.strip() for line in listed.output.splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith("cli-parent"))
    assert lines[at + 1].startswith(f"↳ {child}"), listed.output
    assert "temp-*" not in lines  # its only temp-* session is listed under its parent

    rows = [
        SessionRow(child, "", 3, running=False, parent="cli-parent"),
        SessionRow("cli-other", "", 5, running=False),
        SessionRow("cli-parent", "", 2, running=False),
        SessionRow("temp-loose", "", 9, running=False),
    ]
    picker = SessionPicker(rows, current="cli-other")
    assert [r.session_id for r in picker.rows] == ["cli-other", "cli-parent", child]
    assert "↳" in picker._label(picker.rows[2]).plain
