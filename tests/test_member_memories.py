"""Memory of people: what a member asks the bot to remember is theirs. It reaches the model
only in a task that member asked for (in a Telegram group shared with others, never when
another member asks), across their linked identities, and goes with /forget ID and with the
erasure of their data. Driven through the fake Telegram group, the openai agent and the fake
model, whose requests show what the model was given."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text, ToolCalls
from fakes.telegram import FakeTelegram
from telegram_rig import Rig, reply_in, running

from gateway.events import Inbound, Origin
from gateway.memory.remembered import MAX_MEMORIES, MAX_MEMORY_CHARS
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.member_memories import TooManyMemories

GROUP = -5120
SESSION = f"tg-{GROUP}"
ANN_ID, BOB_ID = 51, 52
SECRET = "I am allergic to peanuts"


def model_saw(model: FakeOpenAI, index: int = -1) -> str:
    """Everything one request to the model carried, as text."""
    return json.dumps(model.requests[index]["messages"], ensure_ascii=False)


@pytest.fixture
async def chat(tmp_path: Path) -> AsyncIterator[tuple[FakeOpenAI, FakeTelegram, Rig]]:
    async with (
        FakeOpenAI() as model,
        FakeTelegram() as telegram,
        running(telegram, tmp_path / "home", **model.agent_settings()) as rig,
    ):
        yield model, telegram, rig


async def ask(
    model: FakeOpenAI, telegram: FakeTelegram, who: dict[str, Any], text: str, answer: str
) -> str:
    """`who` asks the bot in the group; what the model was given for it."""
    asked = len(model.requests)
    model.script(Text(answer))
    group = telegram.group(GROUP, "crew")
    telegram.inject_message(group, who, f"@{telegram.bot_user['username']} {text}")
    await reply_in(telegram, GROUP, answer)
    assert len(model.requests) == asked + 1
    return model_saw(model)


async def command(telegram: FakeTelegram, who: dict[str, Any], text: str, expect: str) -> str:
    telegram.inject_message(telegram.group(GROUP, "crew"), who, text)
    sent = await reply_in(telegram, GROUP, expect)
    return str(sent["text"])


async def test_a_memory_reaches_the_model_only_when_its_member_asks(
    chat: tuple[FakeOpenAI, FakeTelegram, Rig],
) -> None:
    model, telegram, rig = chat
    ann, bob = telegram.user(ANN_ID, "Ann"), telegram.user(BOB_ID, "Bob")
    said = await command(telegram, ann, f"/remember {SECRET}", "remembered as memory")
    memory_id = said.split("memory ")[1].split(":")[0]

    assert SECRET not in await ask(model, telegram, bob, "what should I cook?", "Pasta.")
    seen = await ask(model, telegram, ann, "what should I cook?", "Curry, no peanuts.")
    assert SECRET in seen and "Ann asked you to remember" in seen

    # Bob sees none of Ann's, and cannot remove hers by its number.
    await command(telegram, bob, "/memories", "nothing remembered about you")
    await command(telegram, bob, f"/forget {memory_id}", f"you have no memory {memory_id}")
    listed = await command(telegram, ann, "/memories", "Remembered about you")
    assert f"{memory_id}. {SECRET}" in listed

    await command(telegram, ann, f"/forget {memory_id}", f"forgot memory {memory_id}")
    assert SECRET not in await ask(model, telegram, ann, "and dessert?", "Fruit.")
    assert await rig.runtime.store.member_memories.of_member(f"telegram:{ANN_ID}") == []


async def test_forget_me_erases_the_members_memories(
    chat: tuple[FakeOpenAI, FakeTelegram, Rig],
) -> None:
    model, telegram, rig = chat
    ann, bob = telegram.user(ANN_ID, "Ann"), telegram.user(BOB_ID, "Bob")
    await command(telegram, ann, f"/remember {SECRET}", "remembered as memory")
    await command(telegram, bob, "/remember I like jazz", "remembered as memory")
    await command(telegram, ann, "/forget-me", "cannot be undone")
    done = await command(telegram, ann, "/forget-me confirm", "Erased")
    assert "1 memories removed" in done
    assert SECRET not in await ask(model, telegram, ann, "what should I cook?", "Soup.")
    store = rig.runtime.store.member_memories
    assert await store.of_member(f"telegram:{ANN_ID}") == []
    assert [m.text for m in await store.of_member(f"telegram:{BOB_ID}")] == ["I like jazz"]


async def remember_prompt(
    model: FakeOpenAI, telegram: FakeTelegram, who: dict[str, Any], fact: str, answer: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`who` writes to the bot, whose model calls `remember` with `fact`: the confirmation
    prompt posted in the group (its parameters, and the message as posted)."""
    model.script(ToolCalls([("call_r", "remember", {"text": fact})]), Text(answer))
    telegram.inject_message(
        telegram.group(GROUP, "crew"), who, f"@{telegram.bot_user['username']} hi"
    )
    prompt = await telegram.wait_for_call(
        "sendMessage", lambda p: "reply_markup" in p and p.get("chat_id") == GROUP, 10
    )
    return prompt, telegram.sent_messages(GROUP)[-1]


def button(prompt: dict[str, Any], label: str) -> str:
    buttons = prompt["reply_markup"]["inline_keyboard"][0]
    return str(next(b for b in buttons if b["text"] == label)["callback_data"])


async def test_the_remember_tool_keeps_only_what_the_member_agreed_to(
    chat: tuple[FakeOpenAI, FakeTelegram, Rig],
) -> None:
    model, telegram, rig = chat
    ann, bob = telegram.user(ANN_ID, "Ann"), telegram.user(BOB_ID, "Bob")
    prompt, posted = await remember_prompt(
        model, telegram, ann, "Ann prefers metric units", "Noted."
    )
    assert "remember" in prompt["text"] and "metric" in prompt["text"]
    approve = button(prompt, "Approve")
    telegram.inject_callback(bob, posted, approve)  # not Bob's to agree to
    await telegram.wait_for_call("answerCallbackQuery", timeout=10)
    store = rig.runtime.store.member_memories
    assert await store.of_member(f"telegram:{ANN_ID}") == []
    telegram.inject_callback(ann, posted, approve)
    await reply_in(telegram, GROUP, "Noted.")
    kept = await store.of_member(f"telegram:{ANN_ID}")
    assert [(m.text, m.via, m.asked_in) for m in kept] == [
        ("Ann prefers metric units", "tool", SESSION)
    ]
    assert "Ann prefers metric units" in await ask(model, telegram, ann, "how far?", "5 km.")


async def test_a_denied_remember_keeps_nothing(
    chat: tuple[FakeOpenAI, FakeTelegram, Rig],
) -> None:
    model, telegram, rig = chat
    ann = telegram.user(ANN_ID, "Ann")
    prompt, posted = await remember_prompt(
        model, telegram, ann, "Ann lives at 4 Elm Street", "Fine, I will not."
    )
    telegram.inject_callback(ann, posted, button(prompt, "Deny"))
    await reply_in(telegram, GROUP, "Fine, I will not.")
    assert await rig.runtime.store.member_memories.of_member(f"telegram:{ANN_ID}") == []
    assert "denied" in model_saw(model)


# -- the store and the commands, on the offline agent ---------------------------------------


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    rt = await Runtime.start(Settings(home=tmp_path / "home", _env_file=None))
    try:
        yield rt
    finally:
        await rt.close()


async def run_command(rt: Runtime, origin: Origin, session_id: str, text: str) -> str:
    sub = await rt.router.submit(Inbound(origin, session_id, text))
    assert sub.command is not None, sub  # answered as a command, never sent to the agent
    return sub.command.text


TG_ANN = Origin("telegram", sender_id=str(ANN_ID), sender_name="Ann")
HTTP_ANN = Origin("http", sender_id="ann", sender_name="Ann")
SHARED_TOKEN = Origin("http", sender_id="api", sender_name="operator")


async def test_memories_follow_the_member_across_linked_identities(runtime: Runtime) -> None:
    await runtime.store.ensure(SESSION)
    await runtime.store.ensure("chat-ann")
    said = await run_command(runtime, TG_ANN, SESSION, f"/remember {SECRET}")
    assert said.startswith("remembered as memory")
    memories = runtime.store.member_memories
    assert await memories.of_member("http:ann") == []  # not linked yet: someone else
    await runtime.store.ownership.link("http:ann", "telegram:51", by="test")
    assert [m.text for m in await memories.of_member("http:ann")] == [SECRET]
    # The same words again, from the other identity: kept once.
    again = await run_command(runtime, HTTP_ANN, "chat-ann", f"/remember  {SECRET} ")
    assert again.startswith("remembered already")
    # Removed from the other identity too: the memory is the person's.
    memory_id = (await memories.of_member("http:ann"))[0].id
    assert await run_command(runtime, HTTP_ANN, "chat-ann", f"/forget {memory_id}") == (
        f"forgot memory {memory_id}"
    )
    exported = await runtime.store.member_memories.of_member("telegram:51")
    assert exported == []


async def test_bad_memories_are_refused_with_a_reason(runtime: Runtime) -> None:
    await runtime.store.ensure(SESSION)
    empty = await run_command(runtime, TG_ANN, SESSION, "/remember   ")
    assert "say what to remember" in empty
    long = await run_command(runtime, TG_ANN, SESSION, "/remember " + "x" * (MAX_MEMORY_CHARS + 1))
    assert f"at most {MAX_MEMORY_CHARS} characters" in long
    shared = await run_command(runtime, SHARED_TOKEN, "chat-op", "/remember I am the operator")
    assert "stands for no one member" in shared
    odd = await run_command(runtime, TG_ANN, SESSION, "/forget twelve")
    assert odd.startswith("usage: /forget ID")
    memories = runtime.store.member_memories
    kept, _ = await memories.add(
        "telegram:51", "tea\x00 with \ud800 milk", session_id=SESSION, via="command", at=1
    )
    assert kept.text == "tea with ? milk"  # NUL gone, a lone surrogate replaced
    for n in range(MAX_MEMORIES - 1):
        await memories.add("telegram:51", f"fact {n}", session_id=SESSION, via="command", at=1)
    with pytest.raises(TooManyMemories):
        await memories.add("telegram:51", "one more", session_id=SESSION, via="command", at=1)
    full = await run_command(runtime, TG_ANN, SESSION, "/remember one more")
    assert f"you have {MAX_MEMORIES} memories" in full


async def test_export_carries_the_memories(runtime: Runtime) -> None:
    from gateway.member_data.service import MemberData

    await runtime.store.ensure(SESSION)
    await run_command(runtime, TG_ANN, SESSION, f"/remember {SECRET}")
    document = await MemberData(runtime.store).export("telegram:51")
    assert [(m["text"], m["via"]) for m in document["memories"]] == [(SECRET, "command")]
    other = await MemberData(runtime.store).export("telegram:52")
    assert other["memories"] == []
