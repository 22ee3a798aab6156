"""A tool call whose arguments break the tool's schema goes back to the model as an error and
is never put to a person: the openai and offline agents behind the real Telegram client,
against the fake model and the fake Bot API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text, ToolCalls
from fakes.telegram import FakeTelegram
from telegram_rig import Rig, last_task_of, reply_in, running

from gateway.agents.tool_args import InvalidArguments, check_args
from gateway.agents.tools import BUILTIN_TOOLS


def prompts_sent(telegram: FakeTelegram, chat_id: int) -> list[dict[str, Any]]:
    """The bot's messages with buttons: an Approve/Deny prompt is one."""
    return [m for m in telegram.sent_messages(chat_id) if "reply_markup" in m]


async def event_kinds(rig: Rig, sid: str) -> list[str]:
    view = rig.runtime.router.task(await last_task_of(rig, sid))
    return [event.kind for event in view.events]


async def test_a_write_without_a_name_is_an_error_for_the_model_not_a_prompt(
    tmp_path: Path, telegram: FakeTelegram, model: FakeOpenAI
) -> None:
    async with running(telegram, tmp_path / "home", **model.agent_settings()) as rig:
        model.script(
            ToolCalls([("call_w", "write_file", {"path": "plan.md", "content": "ship"})]),
            Text("I named the file wrongly."),
        )
        ann = telegram.user(41, "Ann")
        telegram.inject_message(telegram.private_chat(41, "Ann"), ann, "save the plan")
        await reply_in(telegram, 41, "I named the file wrongly.")
        assert prompts_sent(telegram, 41) == []
        kinds = await event_kinds(rig, "tg-41")
        assert "confirm" not in kinds and kinds.count("tool_result") == 1
        (told,) = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
        assert told["tool_call_id"] == "call_w"
        content = told["content"]
        assert content.startswith("error (error): InvalidArguments: invalid arguments for")
        assert "'name' is a required property" in content
        assert "'path' was unexpected" in content
        assert not (rig.runtime.store.files("tg-41").dir / "workspace" / "plan.md").exists()


async def test_the_offline_agent_s_bad_call_is_refused_without_asking(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    async with running(telegram, tmp_path / "home") as rig:
        ann = telegram.user(41, "Ann")
        chat = telegram.private_chat(41, "Ann")
        telegram.inject_message(chat, ann, '!tool write_file {"name": "a.txt", "content": 5}')
        reply = await reply_in(telegram, 41, "write_file: error (error)")
        assert "at content: 5 is not of type 'string'" in reply["text"]
        assert prompts_sent(telegram, 41) == []
        assert "confirm" not in await event_kinds(rig, "tg-41")
        # A call that keeps to the schema is still asked about.
        telegram.inject_message(chat, ann, '!tool write_file {"name": "a.txt", "content": "x"}')
        await telegram.wait_for_call(
            "sendMessage", lambda p: p.get("chat_id") == 41 and "reply_markup" in p, 10
        )


def test_a_broken_schema_checks_nothing() -> None:
    # An MCP server's schema with an unknown type: the server is left to judge the call.
    check_args("docs__search", {"type": "object", "properties": {"q": {"type": "strin"}}}, {})
    check_args("docs__search", {"type": "object", "$ref": "https://example.invalid/s"}, {})
    schema = BUILTIN_TOOLS["ask_user"].parameters
    named = r"at options/1: 2 is not of type .* \(and 1 more\)$"
    with pytest.raises(InvalidArguments, match=named):
        check_args("ask_user", schema, {"question": 1, "options": [1, 2], "x": 0})
