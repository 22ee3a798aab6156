"""A free-text question on Telegram is a ForceReply message, answered by replying to it. Which
bot message answers which task outlives a restart: a reply to the question as it was asked
before the restart answers it, like a reply to its asking after it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from chat_drivers import ANN, A, TelegramDriver, nth_said, open_telegram, said_with, task_of


@pytest.fixture
async def chat(tmp_path: Path) -> AsyncIterator[TelegramDriver]:
    async with open_telegram(tmp_path / "home") as driver:
        assert isinstance(driver, TelegramDriver)
        await driver.start()
        yield driver


@pytest.mark.parametrize("replied_to", ["the question asked before", "the question asked again"])
async def test_a_reply_to_a_question_open_at_a_restart_answers_it(
    chat: TelegramDriver, replied_to: str
) -> None:
    chat.post(A, ANN, "!ask favourite colour?")
    before = await said_with(chat, A, "favourite colour?")
    await chat.restart()
    assert await chat.runtime.router.recover() == 1
    again = await nth_said(chat, A, 1)  # asked again where it was asked
    first, _ = chat.said(A)
    assert first.id == before.id and "favourite colour?" in again.text
    assert "asked again" in first.text and "asked again" not in again.text

    chat.reply(A, ANN, "blue", to=before if replied_to == "the question asked before" else again)
    await said_with(chat, A, "answer: blue")
    state = await chat.runtime.router.wait(await task_of(chat, A), 10)
    assert state.status == "done"
    # The reply answered the question: it started no task of its own.
    messages = await chat.runtime.store.recent_messages(chat.session_id(A), 50)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "!ask favourite colour?"),
        ("assistant", "answer: blue"),
    ]
    # Both askings now say how the question was answered.
    closed = {s.id: s.text for s in chat.said(A) if s.id in (before.id, again.id)}
    assert closed == {before.id: "answered “blue” by ann", again.id: "answered “blue” by ann"}
