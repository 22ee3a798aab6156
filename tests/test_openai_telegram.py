"""The openai agent behind the Telegram front-end: a tool call confirmed in a group, by the
person who asked, against the fake model and the fake Bot API."""

from __future__ import annotations

from pathlib import Path

from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text, ToolCalls
from fakes.telegram import FakeTelegram
from telegram_rig import reply_in, running
from test_openai_agent import usage_rows


async def test_confirmation_answered_in_a_telegram_group(tmp_path: Path) -> None:
    async with FakeOpenAI() as model, FakeTelegram() as telegram:
        options = model.agent_settings()
        async with running(telegram, tmp_path / "home", **options) as rig:
            model.script(
                ToolCalls([("call_w", "write_file", {"name": "plan.md", "content": "ship"})]),
                Text("Saved the plan."),
            )
            group = telegram.group(-310, "crew")
            ann, bob = telegram.user(41, "Ann"), telegram.user(42, "Bob")
            telegram.inject_message(group, ann, f"@{telegram.bot_user['username']} save the plan")
            prompt = await telegram.wait_for_call(
                "sendMessage", lambda p: "reply_markup" in p and p.get("chat_id") == -310, 10
            )
            assert "write_file" in prompt["text"]
            buttons = prompt["reply_markup"]["inline_keyboard"][0]
            approve = next(b for b in buttons if b["text"] == "Approve")
            posted = telegram.sent_messages(-310)[-1]
            telegram.inject_callback(bob, posted, approve["callback_data"])
            refusal = await telegram.wait_for_call("answerCallbackQuery", timeout=10)
            assert "Ann" in refusal["text"]  # only the requester (or an admin) may answer
            assert len(model.requests) == 1  # nothing ran while it waited
            telegram.inject_callback(ann, posted, approve["callback_data"])
            await reply_in(telegram, -310, "Saved the plan.")
            workspace = rig.runtime.store.files("tg--310").dir / "workspace"
            assert (workspace / "plan.md").read_text() == "ship"
            assert model.requests[0]["messages"][-1]["content"] == "Ann: save the plan"
            assert [r[4] for r in await usage_rows(rig.runtime)] == ['["call_w"]', "[]"]
