"""The claude agent (Anthropic Messages API) through the router, against a fake Messages API
server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from fakes.anthropic import Cut, Error, FakeAnthropic, Slow, StreamError, Text, ToolUse
from sqlalchemy import text
from sqlmodel import Session

from gateway.agents.openai import SUMMARY_INSTRUCTIONS
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.engine.router import Router
from gateway.events import Inbound, Origin
from gateway.runtime import AGENTS, Runtime
from gateway.settings import Settings

ANN = Origin("http", sender_id="ann", sender_name="Ann")
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(aliases={"claude-alias": "claude-alias-20260101"}) as server:
        yield server


def settings_for(fake: FakeAnthropic, home: Path, **extra: Any) -> Settings:
    options: dict[str, Any] = {
        "home": home,
        "agent": "claude",
        "anthropic_base_url": fake.url,
        "anthropic_api_key": fake.api_key,
        "anthropic_model": "claude-test",
        "confirm_timeout_seconds": 30,
        **extra,
    }
    return Settings(_env_file=None, **options)


async def start(
    fake: FakeAnthropic, home: Path, clock: Clock = SYSTEM_CLOCK, **extra: Any
) -> Runtime:
    return await Runtime.start(settings_for(fake, home, **extra), clock=clock)


@pytest.fixture
async def runtime(fake: FakeAnthropic, tmp_path: Path) -> AsyncIterator[Runtime]:
    rt = await start(fake, tmp_path / "home")
    try:
        yield rt
    finally:
        await rt.close()


@pytest.fixture
async def clocked(fake: FakeAnthropic, tmp_path: Path) -> AsyncIterator[tuple[Runtime, FakeClock]]:
    clock = FakeClock()
    rt = await start(fake, tmp_path / "clocked", clock)
    try:
        yield rt, clock
    finally:
        await rt.close()


async def ask(router: Router, sid: str, message: str, origin: Origin = ANN) -> Any:
    sub = await router.submit(Inbound(origin, sid, message))
    return await router.wait(sub.task_hash, 15)


BACKOFF_UNDER = 30.0  # retry backoffs are shorter; a presence refresher sleeps longer


async def ask_through_backoffs(rt: Runtime, clock: FakeClock, sid: str, message: str) -> Any:
    """`ask`, with the clock moved past every retry backoff as soon as the agent sleeps."""
    sub = await rt.router.submit(Inbound(ANN, sid, message))

    async def until_done() -> None:
        async for _event in rt.router.stream(sub.task_hash):
            pass

    await clock.past_backoffs(until_done(), under=BACKOFF_UNDER)
    return rt.router.task(sub.task_hash)


Row = tuple[str, int, int, int, int, list[str]]


async def usage_rows(rt: Runtime) -> list[Row]:
    def work(session: Session) -> list[Row]:
        res = session.connection().execute(
            text(
                "SELECT model, input, output, cache_read, cache_write, tool_calls "
                "FROM usage ORDER BY id"
            )
        )
        return [(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in res.all()]

    return await rt.store.db.read(work)


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where a request's cache_control marks are: tool names, system and message indexes."""
    marks = [f"tool:{t['name']}" for t in body.get("tools", []) if "cache_control" in t]
    marks += [f"system:{i}" for i, b in enumerate(body["system"]) if "cache_control" in b]
    for m, message in enumerate(body["messages"]):
        content = message["content"]
        marks += [f"message:{m}:{i}" for i, b in enumerate(content) if "cache_control" in b]
    return marks


def test_claude_is_an_agent_name() -> None:
    assert "claude" in AGENTS


async def test_streamed_text_reply_request_and_usage(fake: FakeAnthropic, runtime: Runtime) -> None:
    fake.script(Text("Hello Ann, nice to meet you."))
    state = await ask(runtime.router, "cli-a", "hi there")
    assert (state.status, state.reply) == ("done", "Hello Ann, nice to meet you.")
    assert len([e for e in state.events if e.kind == "text_delta"]) >= 2  # streamed in pieces
    headers = fake.headers[-1]
    assert headers["x-api-key"] == fake.api_key
    assert headers["anthropic-version"] == "2023-06-01"
    body = fake.requests[-1]
    assert (body["model"], body["stream"], body["max_tokens"]) == ("claude-test", True, 8192)
    assert "thinking" not in body  # no reasoning level: no extended thinking
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Ann: hi there", "cache_control": EPHEMERAL}],
        }
    ]
    assert "shared conversation" in body["system"][0]["text"]
    assert {t["name"] for t in body["tools"]} >= {"read_file", "write_file", "ask_user"}
    assert breakpoints(body) == [f"tool:{body['tools'][-1]['name']}", "system:0", "message:0:0"]
    ((model, inp, out, read, write, calls),) = await usage_rows(runtime)
    (use,) = fake.cache_uses
    assert (model, out, calls) == ("claude-test", 6, [])
    # input counts the cache writes (the reference rule for `claude`); reads stay apart.
    assert (inp, read, write) == (use.uncached + use.written, 0, use.written)
    assert use.written > 0


async def test_second_turn_reads_the_cached_prefix(fake: FakeAnthropic, runtime: Runtime) -> None:
    fake.script(Text("Noted, tea it is."), Text("You like tea."))
    await ask(runtime.router, "cli-c", "remember that I like tea")
    await ask(runtime.router, "cli-c", "what do I like?")
    first, second = fake.cache_uses
    # The whole first prompt (tools, system, first message) was written, and read back.
    assert (first.read, first.uncached) == (0, 0)
    assert second.read == first.written
    assert second.written > 0  # the new turn, written for the turn after
    rows = await usage_rows(runtime)
    assert [(r[1], r[3], r[4]) for r in rows] == [
        (first.written, 0, first.written),
        (second.uncached + second.written, second.read, second.written),
    ]
    messages = fake.requests[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert breakpoints(fake.requests[-1])[-1] == "message:2:0"  # only the last message marked


async def test_tool_call_confirmed_then_denied(fake: FakeAnthropic, runtime: Runtime) -> None:
    router = runtime.router
    fake.script(
        ToolUse([("toolu_w", "write_file", {"name": "plan.md", "content": "step 1"})], "On it."),
        Text("Written."),
    )
    sub = await router.submit(Inbound(ANN, "cli-w", "write the plan"))
    state = await router.wait(sub.task_hash, 15, until_prompt=True)
    assert state.prompt is not None and state.prompt.tool == "write_file"
    await router.answer("cli-w", sub.task_hash, ANN, approve=True)
    state = await router.wait(sub.task_hash, 15)
    assert state.reply == "Written."
    target = runtime.store.files("cli-w").dir / "workspace" / "plan.md"
    assert target.read_text() == "step 1"
    loop = fake.requests[-1]["messages"]
    assert loop[-2] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "On it."},
            {
                "type": "tool_use",
                "id": "toolu_w",
                "name": "write_file",
                "input": {"name": "plan.md", "content": "step 1"},
            },
        ],
    }
    (result,) = loop[-1]["content"]
    assert result["tool_use_id"] == "toolu_w" and result["content"].startswith("wrote 6 bytes")
    assert "is_error" not in result
    # The loop's second call reads what its first one wrote.
    assert fake.cache_uses[-1].read == fake.cache_uses[-2].read + fake.cache_uses[-2].written

    fake.script(ToolUse([("toolu_d", "delete_file", {"name": "plan.md"})]), Text("Left it."))
    sub = await router.submit(Inbound(ANN, "cli-w", "delete it"))
    await router.wait(sub.task_hash, 15, until_prompt=True)
    await router.answer("cli-w", sub.task_hash, ANN, approve=False)
    state = await router.wait(sub.task_hash, 15)
    assert state.reply == "Left it." and target.exists()
    (denied,) = fake.requests[-1]["messages"][-1]["content"]
    assert denied["is_error"] is True and denied["content"].startswith("error (denied)")


async def test_parallel_tool_calls_and_their_usage_rows(
    fake: FakeAnthropic, runtime: Runtime
) -> None:
    fake.script(
        ToolUse([("toolu_a", "current_time", {}), ("toolu_b", "list_files", {})]),
        Text("It is late and the workspace is empty."),
    )
    state = await ask(runtime.router, "cli-t", "what time is it, what files?")
    assert state.reply == "It is late and the workspace is empty."
    results = fake.requests[-1]["messages"][-1]["content"]
    assert [r["tool_use_id"] for r in results] == ["toolu_a", "toolu_b"]
    assert results[1]["content"] == "[]"
    assert [r[5] for r in await usage_rows(runtime)] == [["toolu_a", "toolu_b"], []]
    kinds = [e.kind for e in state.events]
    assert kinds.count("tool_call") == 2 and kinds.count("tool_result") == 2


async def test_tool_input_that_is_not_json_is_refused(
    fake: FakeAnthropic, runtime: Runtime
) -> None:
    fake.script(ToolUse([("toolu_x", "read_file", '{"name": "a.txt"')]), Text("Sorry."))
    state = await ask(runtime.router, "cli-x", "read a.txt")
    assert state.reply == "Sorry."
    assistant, results = fake.requests[-1]["messages"][-2:]
    assert assistant["content"][-1]["input"] == {}  # an object goes back, as the API wants
    assert results["content"][0]["is_error"] is True
    assert "invalid arguments" in results["content"][0]["content"]


async def test_thinking_follows_the_reasoning_level_and_goes_back_signed(
    fake: FakeAnthropic, runtime: Runtime
) -> None:
    await runtime.store.ensure("cli-z")
    await runtime.store.update("cli-z", reasoning="high")
    fake.script(
        ToolUse([("toolu_l", "list_files", {})], thinking="The files will tell me."),
        Text("Nothing there.", thinking="Empty list, so nothing."),
    )
    state = await ask(runtime.router, "cli-z", "anything in the workspace?")
    assert (state.status, state.reply) == ("done", "Nothing there.")
    first, second = fake.requests
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 24576}
    assert first["max_tokens"] == 24576 + 8192
    thinking = second["messages"][-2]["content"][0]
    # Unchanged, signature and all (the fake refuses the call otherwise).
    assert thinking["type"] == "thinking" and thinking["thinking"] == "The files will tell me."
    assert thinking["signature"].startswith("sig-")
    streamed = "".join(e.text for e in state.events if e.kind == "text_delta")
    assert streamed == "Nothing there."  # thinking is never reply text

    await runtime.store.update("cli-z", reasoning="low")
    fake.script(Text("Quick."))
    await ask(runtime.router, "cli-z", "and now?")
    assert fake.requests[-1]["thinking"]["budget_tokens"] == 2048


async def test_default_reasoning_setting_turns_thinking_on(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    rt = await start(fake, tmp_path / "h", reasoning="medium")
    try:
        fake.script(Text("Considered."))
        await ask(rt.router, "cli-m", "think")
        assert fake.requests[-1]["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    finally:
        await rt.close()


async def test_429_waits_as_long_as_retry_after_says(
    fake: FakeAnthropic, clocked: tuple[Runtime, FakeClock]
) -> None:
    rt, clock = clocked
    fake.script(Error(429, "Number of request tokens has exceeded your rate limit", 7), Text("Ok."))
    sub = await rt.router.submit(Inbound(ANN, "cli-r", "hello"))
    assert await clock.next_sleep(under=BACKOFF_UNDER) == 7  # what the server asked for
    await clock.advance(6.9)
    assert len(fake.requests) == 1
    await clock.advance(0.1)
    state = await rt.router.wait(sub.task_hash, 15)
    assert (state.status, state.reply) == ("done", "Ok.")
    assert len(fake.requests) == 2
    assert len(await usage_rows(rt)) == 1  # the refused call cost nothing


async def test_overloaded_529_and_overloaded_event_are_retried(
    fake: FakeAnthropic, clocked: tuple[Runtime, FakeClock]
) -> None:
    rt, clock = clocked
    fake.script(Error(529, "Overloaded"), StreamError(), Text("Made it."))
    state = await ask_through_backoffs(rt, clock, "cli-o", "hello")
    assert (state.status, state.reply) == ("done", "Made it.")
    assert len(fake.requests) == 3


async def test_outage_is_a_clear_error_and_keeps_the_message(
    fake: FakeAnthropic, clocked: tuple[Runtime, FakeClock]
) -> None:
    rt, clock = clocked
    fake.script(*[Error(500, "Internal server error")] * 4)
    state = await ask_through_backoffs(rt, clock, "cli-out", "are you there?")
    assert state.status == "error" and "not available" in state.error
    assert len(fake.requests) == 4
    assert [m.content for m in await rt.store.recent_messages("cli-out")] == ["are you there?"]


async def test_bad_request_is_a_clear_error_and_not_retried(
    fake: FakeAnthropic, runtime: Runtime
) -> None:
    fake.script(Error(400, "prompt is too long: 212345 tokens > 200000 maximum"))
    state = await ask(runtime.router, "cli-b", "hi")
    assert state.status == "error"
    assert "invalid_request_error" in state.error and "prompt is too long" in state.error
    assert len(fake.requests) == 1


async def test_an_error_event_that_is_not_transient_ends_the_task(
    fake: FakeAnthropic, runtime: Runtime
) -> None:
    fake.script(StreamError("invalid_request_error", "tool input schema is invalid"))
    state = await ask(runtime.router, "cli-e", "hi")
    assert state.status == "error" and "tool input schema is invalid" in state.error
    assert len(fake.requests) == 1


async def test_cancel_does_not_wait_for_a_slow_model(fake: FakeAnthropic, runtime: Runtime) -> None:
    fake.script(Slow(60, Text("never seen")))
    sub = await runtime.router.submit(Inbound(ANN, "cli-slow", "think hard"))
    await fake.wait_for_request()
    assert await runtime.router.cancel("cli-slow", sub.task_hash, by="Ann")
    state = await runtime.router.wait(sub.task_hash, 5)
    assert state.status == "canceled"


async def test_rejected_key(fake: FakeAnthropic, tmp_path: Path) -> None:
    rt = await start(fake, tmp_path / "h", anthropic_api_key="sk-ant-wrong")
    try:
        state = await ask(rt.router, "cli-k", "hi")
        assert state.status == "error"
        assert "rejected the API key" in state.error and "invalid x-api-key" in state.error
    finally:
        await rt.close()


async def test_stream_cut_mid_answer_is_retried_without_repeating_text(
    fake: FakeAnthropic, clocked: tuple[Runtime, FakeClock]
) -> None:
    rt, clock = clocked
    answer = "The build is green and the release can go out tonight."
    fake.script(Cut(answer, pieces=4), Text(answer))
    state = await ask_through_backoffs(rt, clock, "cli-cut", "status?")
    assert (state.status, state.reply) == ("done", answer)
    streamed = "".join(e.text for e in state.events if e.kind == "text_delta")
    assert streamed == answer and len(fake.requests) == 2


async def test_context_has_persona_senders_and_history(
    fake: FakeAnthropic, runtime: Runtime
) -> None:
    await runtime.store.ensure("tg--1")
    await runtime.store.update("tg--1", persona="a terse pirate")
    bob = Origin("telegram", sender_id="bob", sender_name="Bob")
    await runtime.router.record(Inbound(bob, "tg--1", "I prefer tea"))
    fake.script(Text("Arr."))
    await ask(runtime.router, "tg--1", "what does Bob like?")
    body = fake.requests[-1]
    assert "Persona: a terse pirate" in body["system"][0]["text"]
    # Two people before the model answers: one user turn, a block each.
    (turn,) = body["messages"]
    assert [b["text"] for b in turn["content"]] == ["Bob: I prefer tea", "Ann: what does Bob like?"]


async def test_a_window_opening_with_a_reply_starts_at_a_user_turn(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    rt = await start(fake, tmp_path / "h", history_window=1)
    rt.engine.runner.after_task.clear()  # the summary runs when the test says so
    try:
        fake.script(Text("first answer"), Text("Ann asked."), Text("second answer"))
        await ask(rt.router, "cli-w1", "first question")
        assert rt.summary is not None and await rt.summary.run("cli-w1")  # folds the question
        state = await ask(rt.router, "cli-w1", "second question")
        assert state.reply == "second answer"  # the fake refuses an opening assistant turn
        (turn,) = fake.requests[-1]["messages"]
        assert [b["text"] for b in turn["content"]] == ["Ann: second question"]
    finally:
        await rt.close()


async def test_a_long_conversation_reads_its_messages_from_the_cache(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    """Past the window, the conversation's start moves only when a batch is folded: every
    call between two folds reads the whole previous prompt from the cache."""
    rt = await start(fake, tmp_path / "h", history_window=8)
    rt.engine.runner.after_task.clear()  # folds happen when the test says so, after each turn
    assert rt.summary is not None
    try:
        fake.script(*[Text("fine thanks")] * 40)
        folded_after: list[bool] = []
        calls: list[int] = []  # the index of each turn's request
        for turn in range(16):
            await ask(rt.router, "cli-long", f"message number {turn}")
            calls.append(len(fake.requests) - 1)
            folded_after.append(await rt.summary.run("cli-long"))
        uses = [fake.cache_uses[i] for i in calls]
        assert all("tools" in fake.requests[i] for i in calls)  # not summary calls
        for turn in range(1, 16):
            before, after = uses[turn - 1], uses[turn]
            if not folded_after[turn - 1]:
                assert after.read == before.read + before.written > 0, turn
        folds = sum(folded_after[:-1])
        assert 0 < folds <= 8  # folds come in batches, not every turn
    finally:
        await rt.close()


async def test_usage_names_the_model_the_api_answered_with(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    rt = await start(fake, tmp_path / "h", anthropic_model="claude-alias")
    try:
        fake.script(Text("Hi."))
        await ask(rt.router, "cli-n", "hi")
        assert fake.requests[-1]["model"] == "claude-alias"
        assert [r[0] for r in await usage_rows(rt)] == ["claude-alias-20260101"]
    finally:
        await rt.close()


async def test_summary_fold_and_the_summary_in_the_cached_system(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    rt = await start(fake, tmp_path / "h", summary_model="claude-small", history_window=2)
    rt.engine.runner.after_task.clear()  # the summary runs when the test says so
    try:
        fake.script(Text("one"), Text("two"), Text("Ann greeted twice."))
        for message in ("hello", "hello again"):
            await ask(rt.router, "cli-s", message)
        assert rt.summary is not None and await rt.summary.run("cli-s")
        request = fake.requests[-1]
        assert request["model"] == "claude-small" and "tools" not in request
        assert "thinking" not in request
        assert request["system"] == [{"type": "text", "text": SUMMARY_INSTRUCTIONS}]
        assert "Ann: hello" in request["messages"][-1]["content"][0]["text"]
        summary = rt.store.files("cli-s").read_summary()
        assert summary is not None and summary.text == "Ann greeted twice."

        fake.script(Text("Hello again, Ann."))
        await ask(rt.router, "cli-s", "do you remember me?")
        system = fake.requests[-1]["system"]
        assert system[-1]["text"].endswith("Ann greeted twice.")
        assert "cache_control" in system[-1] and "cache_control" not in system[0]
    finally:
        await rt.close()


async def test_a_tool_loop_that_never_answers_stops(fake: FakeAnthropic, tmp_path: Path) -> None:
    rt = await start(fake, tmp_path / "h", max_tool_iterations=3)
    try:
        fake.script(*[ToolUse([(f"toolu_{i}", "current_time", {})]) for i in range(3)])
        state = await ask(rt.router, "cli-l", "loop")
        assert state.status == "error" and "stopped after 3 model calls" in state.error
        assert len(fake.requests) == 3
    finally:
        await rt.close()


def test_api_key_is_read_from_anthropics_own_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENVOY_ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    key = Settings(_env_file=None).anthropic_api_key
    assert key is not None and key.get_secret_value() == "sk-ant-from-env"
    monkeypatch.setenv("AGENVOY_ANTHROPIC_API_KEY", "sk-ant-ours")
    key = Settings(_env_file=None).anthropic_api_key
    assert key is not None and key.get_secret_value() == "sk-ant-ours"


async def test_confirmation_answered_in_a_telegram_group(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    from fakes.telegram import FakeTelegram
    from telegram_rig import reply_in, running

    async with FakeTelegram() as telegram:
        options = {
            "agent": "claude",
            "anthropic_base_url": fake.url,
            "anthropic_api_key": fake.api_key,
            "anthropic_model": "claude-test",
        }
        async with running(telegram, tmp_path / "home", **options) as rig:
            fake.script(
                ToolUse([("toolu_g", "write_file", {"name": "todo.md", "content": "ship"})]),
                Text("Saved the list."),
            )
            group = telegram.group(-300, "crew")
            ann, bob = telegram.user(31, "Ann"), telegram.user(32, "Bob")
            bot = telegram.bot_user["username"]
            telegram.inject_message(group, ann, f"@{bot} save our todo list")
            prompt = await telegram.wait_for_call(
                "sendMessage", lambda p: "reply_markup" in p and p.get("chat_id") == -300, 10
            )
            assert "write_file" in prompt["text"]
            buttons = prompt["reply_markup"]["inline_keyboard"][0]
            approve = next(b for b in buttons if b["text"] == "Approve")
            posted = telegram.sent_messages(-300)[-1]
            telegram.inject_callback(bob, posted, approve["callback_data"])
            refusal = await telegram.wait_for_call("answerCallbackQuery", timeout=10)
            assert "Ann" in refusal["text"]  # only the requester (or an admin) may answer
            assert len(fake.requests) == 1
            telegram.inject_callback(ann, posted, approve["callback_data"])
            await reply_in(telegram, -300, "Saved the list.")
            workspace = rig.runtime.store.files("tg--300").dir / "workspace"
            assert (workspace / "todo.md").read_text() == "ship"
            turn = fake.requests[-1]["messages"][0]["content"]
            assert turn[-1]["text"] == "Ann: save our todo list"
            assert [r[5] for r in await usage_rows(rig.runtime)] == [["toolu_g"], []]
