"""The openai agent through the router, against a fake OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from fakes.openai import Cut, Error, FakeOpenAI, Malformed, Slow, Text, ToolCalls
from sqlalchemy import text
from sqlmodel import Session

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.commands.registry import CommandReply
from gateway.engine.router import Router
from gateway.events import Inbound, Origin
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.history_file import HistoryMessage

ANN = Origin("http", sender_id="ann", sender_name="Ann")
BOB = Origin("http", sender_id="bob", sender_name="Bob")


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


async def start(fake: FakeOpenAI, home: Path, clock: Clock = SYSTEM_CLOCK, **extra: Any) -> Runtime:
    options: dict[str, Any] = {
        "home": home,
        "agent": "openai",
        "openai_base_url": fake.url,
        "openai_api_key": fake.api_key,
        "model": "fake-model",
        "confirm_timeout_seconds": 30,
        **extra,
    }
    settings = Settings(_env_file=None, **options)
    return await Runtime.start(settings, clock=clock)


@pytest.fixture
async def runtime(fake: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Runtime]:
    rt = await start(fake, tmp_path / "home")
    try:
        yield rt
    finally:
        await rt.close()


async def ask(router: Router, sid: str, message: str) -> Any:
    sub = await router.submit(Inbound(ANN, sid, message))
    return sub, await router.wait(sub.task_hash, 15)


# Retry backoffs are at most this long; a presence refresher sleeps longer.
BACKOFF_UNDER = 30.0


async def ask_through_backoffs(rt: Runtime, clock: FakeClock, sid: str, message: str) -> Any:
    """`ask`, with the clock moved past every retry backoff as soon as the agent sleeps."""
    sub = await rt.router.submit(Inbound(ANN, sid, message))

    async def until_done() -> None:
        async for _event in rt.router.stream(sub.task_hash):
            pass

    await clock.past_backoffs(until_done(), under=BACKOFF_UNDER)
    return sub, rt.router.task(sub.task_hash)


@pytest.fixture
async def clocked(fake: FakeOpenAI, tmp_path: Path) -> AsyncIterator[tuple[Runtime, FakeClock]]:
    clock = FakeClock()
    rt = await start(fake, tmp_path / "clocked", clock)
    try:
        yield rt, clock
    finally:
        await rt.close()


async def usage_rows(rt: Runtime) -> list[tuple[str, int, int, int, str]]:
    def work(session: Session) -> list[tuple[str, int, int, int, str]]:
        res = session.connection().execute(
            text("SELECT model, input, output, elapsed_ms, tool_calls FROM usage ORDER BY id")
        )
        return [(r[0], r[1], r[2], r[3], r[4]) for r in res.all()]

    return await rt.store.db.read(work)


async def test_streamed_text_reply_and_usage(fake: FakeOpenAI, runtime: Runtime) -> None:
    fake.script(Text("Hello Ann, nice to meet you."))
    _sub, state = await ask(runtime.router, "cli-o", "hi there")
    assert (state.status, state.reply) == ("done", "Hello Ann, nice to meet you.")
    deltas = [e for e in state.events if e.kind == "text_delta"]
    assert len(deltas) >= 2  # streamed in pieces
    request = fake.requests[-1]
    assert request["model"] == "fake-model" and request["stream"] is True
    assert request["messages"][-1] == {"role": "user", "content": "Ann: hi there"}
    ((model, inp, out, elapsed, calls),) = await usage_rows(runtime)
    assert (model, out, calls) == ("fake-model", 6, "[]") and inp > 0 and elapsed >= 0
    (summary,) = await runtime.store.usage.summary()
    assert summary.model == "fake-model"


async def test_tool_using_conversation(fake: FakeOpenAI, runtime: Runtime) -> None:
    fake.script(
        ToolCalls([("call_a", "current_time", {}), ("call_b", "list_files", {})]),
        Text("It is late and the workspace is empty."),
    )
    _sub, state = await ask(runtime.router, "cli-t", "what time is it, what files?")
    assert state.reply == "It is late and the workspace is empty."
    second = fake.requests[-1]["messages"]
    tool_messages = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_a", "call_b"]
    assert tool_messages[1]["content"] == "[]"
    rows = await usage_rows(runtime)
    assert [json.loads(r[4]) for r in rows] == [["call_a", "call_b"], []]
    kinds = [e.kind for e in state.events]
    assert kinds.count("tool_call") == 2 and kinds.count("tool_result") == 2


async def test_write_file_needs_confirmation(fake: FakeOpenAI, runtime: Runtime) -> None:
    router = runtime.router
    fake.script(
        ToolCalls([("w1", "write_file", {"name": "plan.md", "content": "step 1"})]),
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

    fake.script(
        ToolCalls([("w2", "delete_file", {"name": "plan.md"})]),
        Text("Fine, I left it."),
    )
    sub = await router.submit(Inbound(ANN, "cli-w", "delete it"))
    await router.wait(sub.task_hash, 15, until_prompt=True)
    await router.answer("cli-w", sub.task_hash, ANN, approve=False)
    state = await router.wait(sub.task_hash, 15)
    assert state.reply == "Fine, I left it." and target.exists()
    denied = [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
    assert denied[-1]["content"].startswith("error (denied)")


async def test_steer_gives_the_model_what_was_sent_during_a_tool(
    fake: FakeOpenAI, runtime: Runtime
) -> None:
    router = runtime.router
    assert (await router.submit(Inbound(ANN, "cli-st", "/queue steer"))).command is not None
    fake.script(
        ToolCalls([("w1", "write_file", {"name": "plan.md", "content": "step 1"})]),
        Text("Written, and noted."),
    )
    sub = await router.submit(Inbound(ANN, "cli-st", "write the plan"))
    state = await router.wait(sub.task_hash, 15, until_prompt=True)
    assert state.prompt is not None
    late = await router.submit(Inbound(BOB, "cli-st", "call it plan-v1"))
    await router.answer("cli-st", sub.task_hash, ANN, approve=True)
    assert (await router.wait(sub.task_hash, 15)).reply == "Written, and noted."
    # The next model call had the tool's result, then Bob's message as a user turn.
    after_tool = fake.requests[-1]["messages"][-2:]
    assert after_tool[0]["role"] == "tool"
    assert after_tool[1] == {"role": "user", "content": "Bob: call it plan-v1"}
    view = router.task(late.task_hash)
    assert (view.status, view.collected_into) == ("collected", sub.task_hash)


async def test_paths_outside_the_workspace_are_refused(fake: FakeOpenAI, runtime: Runtime) -> None:
    fake.script(ToolCalls([("r1", "read_file", {"name": "../../etc/passwd"})]), Text("Cannot."))
    _sub, state = await ask(runtime.router, "cli-p", "read the password file")
    assert state.reply == "Cannot."
    (tool,) = [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
    assert "outside the workspace" in tool["content"]
    results = [e for e in state.events if e.kind == "tool_result"]
    assert results[0].status == "error"


def outside_folder(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the secret")
    return outside


async def test_links_in_the_workspace_are_not_followed(
    fake: FakeOpenAI, runtime: Runtime, tmp_path: Path
) -> None:
    outside = outside_folder(tmp_path)
    await runtime.store.ensure("cli-k")
    workspace = runtime.store.files("cli-k").dir / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("mine")
    (workspace / "peek.txt").symlink_to(outside / "secret.txt")
    (workspace / "out").symlink_to(outside, target_is_directory=True)
    fake.script(
        ToolCalls(
            [
                ("k1", "read_file", {"name": "peek.txt"}),
                ("k2", "list_files", {}),
                ("k3", "read_file", {"name": "out/secret.txt"}),
                ("k4", "read_file", {"name": "notes.txt"}),
            ]
        ),
        Text("Looked."),
    )
    _sub, state = await ask(runtime.router, "cli-k", "look around")
    assert state.reply == "Looked."
    results = [m["content"] for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
    assert "'peek.txt' is a link" in results[0]
    assert json.loads(results[1]) == ["notes.txt"]
    assert "'out' is not a folder" in results[2]
    assert results[3] == "mine"
    assert not any("the secret" in r or str(tmp_path) in r for r in results), results


async def test_a_linked_workspace_is_not_written_through(
    fake: FakeOpenAI, runtime: Runtime, tmp_path: Path
) -> None:
    outside = outside_folder(tmp_path)
    await runtime.store.ensure("cli-j")
    (runtime.store.files("cli-j").dir / "workspace").symlink_to(outside)
    fake.script(
        ToolCalls([("j1", "write_file", {"name": "secret.txt", "content": "overwritten"})]),
        Text("Could not."),
    )
    sub = await runtime.router.submit(Inbound(ANN, "cli-j", "write it"))
    await runtime.router.wait(sub.task_hash, 15, until_prompt=True)
    await runtime.router.answer("cli-j", sub.task_hash, ANN, approve=True)
    state = await runtime.router.wait(sub.task_hash, 15)
    assert state.reply == "Could not."
    (tool,) = [m["content"] for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
    assert "the workspace folder is not a folder" in tool and str(tmp_path) not in tool
    assert (outside / "secret.txt").read_text() == "the secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


async def test_429_is_retried_after_retry_after(
    fake: FakeOpenAI, clocked: tuple[Runtime, FakeClock]
) -> None:
    rt, clock = clocked
    fake.script(Error(429, "slow down", retry_after=7), Text("Back again."))
    sub = await rt.router.submit(Inbound(ANN, "cli-r", "hello"))
    assert await clock.next_sleep(under=BACKOFF_UNDER) == 7  # what the server asked for
    await clock.advance(6.9)
    assert len(fake.requests) == 1
    await clock.advance(0.1)
    state = await rt.router.wait(sub.task_hash, 15)
    assert state.reply == "Back again."
    assert len(fake.requests) == 2


async def test_outage_is_a_clear_error_and_keeps_the_message(
    fake: FakeOpenAI, clocked: tuple[Runtime, FakeClock]
) -> None:
    runtime, clock = clocked
    fake.script(*[Error(500, "boom")] * 4)
    _sub, state = await ask_through_backoffs(runtime, clock, "cli-x", "are you there?")
    assert state.status == "error" and "not available" in state.error
    assert len(fake.requests) == 4
    messages = await runtime.store.recent_messages("cli-x")
    assert [m.content for m in messages] == ["are you there?"]


async def test_rejected_key(fake: FakeOpenAI, tmp_path: Path) -> None:
    rt = await start(fake, tmp_path / "h2", openai_api_key="sk-wrong")
    try:
        _sub, state = await ask(rt.router, "cli-k", "hi")
        assert state.status == "error" and "API key" in state.error
    finally:
        await rt.close()


async def test_malformed_chunk_is_skipped(fake: FakeOpenAI, runtime: Runtime) -> None:
    fake.script(Malformed())
    _sub, state = await ask(runtime.router, "cli-m", "hi")
    assert state.status == "done" and state.reply


async def test_context_has_persona_senders_and_history(fake: FakeOpenAI, runtime: Runtime) -> None:
    await runtime.store.ensure("tg--1")
    await runtime.store.update("tg--1", persona="a terse pirate")
    await runtime.router.record(
        Inbound(Origin("http", sender_id="bob", sender_name="Bob"), "tg--1", "I prefer tea")
    )
    fake.script(Text("Arr."))
    await ask(runtime.router, "tg--1", "what does Bob like?")
    messages = fake.requests[-1]["messages"]
    assert "a terse pirate" in messages[0]["content"]
    assert {"role": "user", "content": "Bob: I prefer tea"} in messages
    assert messages[-1]["content"] == "Ann: what does Bob like?"


async def test_summary_model_folds_messages(fake: FakeOpenAI, tmp_path: Path) -> None:
    from gateway.agents.openai import OpenAIAgent

    rt = await start(fake, tmp_path / "h3", summary_model="small-model", history_window=2)
    rt.engine.runner.after_task.clear()
    try:
        fake.script(Text("one"), Text("two"), Text("Ann greeted twice."))
        for message in ("hello", "hello again"):
            await ask(rt.router, "cli-sum", message)
        assert rt.summary is not None and isinstance(rt.agent, OpenAIAgent)
        assert await rt.summary.run("cli-sum")
        request = fake.requests[-1]
        assert request["model"] == "small-model" and "tools" not in request
        assert "Ann: hello" in request["messages"][-1]["content"]
        summary = rt.store.files("cli-sum").read_summary()
        assert summary is not None and summary.text == "Ann greeted twice."
    finally:
        await rt.close()


async def test_slow_answer_within_the_timeout_streams_through(
    fake: FakeOpenAI, runtime: Runtime
) -> None:
    fake.script(Slow(0.5, Text("Sorry for the wait, here it is.")))
    _sub, state = await ask(runtime.router, "cli-slow", "take your time")
    assert (state.status, state.reply) == ("done", "Sorry for the wait, here it is.")
    assert len(fake.requests) == 1


async def test_timed_out_call_is_retried(fake: FakeOpenAI, tmp_path: Path) -> None:
    clock = FakeClock()
    rt = await start(fake, tmp_path / "h", clock, openai_timeout_seconds=0.3)
    try:
        fake.script(Slow(5, Text("too late")), Text("Second try worked."))
        _sub, state = await ask_through_backoffs(rt, clock, "cli-t", "hello?")
        assert (state.status, state.reply) == ("done", "Second try worked.")
        assert len(fake.requests) == 2
    finally:
        await rt.close()


async def test_model_that_never_answers_gives_a_clear_error(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    clock = FakeClock()
    rt = await start(fake, tmp_path / "h", clock, openai_timeout_seconds=0.2)
    try:
        fake.script(*[Slow(5, Text("never"))] * 4)
        _sub, state = await ask_through_backoffs(rt, clock, "cli-n", "anyone?")
        assert state.status == "error" and "not available" in state.error
        assert "TimeoutError" in state.error
        assert [m.content for m in await rt.store.recent_messages("cli-n")] == ["anyone?"]
    finally:
        await rt.close()


async def test_cancel_does_not_wait_for_a_slow_model(fake: FakeOpenAI, runtime: Runtime) -> None:
    fake.script(Slow(60, Text("never seen")))
    sub = await runtime.router.submit(Inbound(ANN, "cli-c", "think hard"))
    await fake.wait_for_request()
    assert await runtime.router.cancel("cli-c", sub.task_hash, by="Ann")
    state = await runtime.router.wait(sub.task_hash, 5)
    assert state.status == "canceled"


async def test_reasoning_level_reaches_the_model(fake: FakeOpenAI, runtime: Runtime) -> None:
    fake.script(Text("plain"), Text("deep"))
    await ask(runtime.router, "cli-z", "first")
    assert "reasoning_effort" not in fake.requests[-1]  # not sent unless asked for
    await runtime.store.update("cli-z", reasoning="high")
    await ask(runtime.router, "cli-z", "second")
    assert fake.requests[-1]["reasoning_effort"] == "high"


async def test_reasoning_command(runtime: Runtime) -> None:
    async def command(text: str) -> CommandReply:
        sub = await runtime.router.submit(Inbound(ANN, "cli-q", text))
        assert sub.command is not None and not sub.task_hash
        return sub.command

    assert not (await command("/reasoning extreme")).ok
    assert (await command("/reasoning low")).ok
    assert (await runtime.store.require("cli-q")).reasoning == "low"
    assert "reasoning: low" in (await command("/status")).text
    assert (await command("/reasoning default")).ok
    assert (await runtime.store.require("cli-q")).reasoning == ""


async def test_reset_empties_the_window_and_nothing_is_folded_again(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    rt = await start(fake, tmp_path / "h", history_window=2)
    rt.engine.runner.after_task.clear()  # the summary runs when the test says so
    try:
        fake.script(Text("one"), Text("two"), Text("Ann said hello twice."))
        for message in ("hello", "hello again"):
            await ask(rt.router, "cli-r", message)
        assert rt.summary is not None and await rt.summary.run("cli-r")
        reset = await rt.router.submit(Inbound(ANN, "cli-r", "/reset"))
        assert reset.command is not None and reset.command.ok

        fake.script(Text("fresh start"))
        await ask(rt.router, "cli-r", "who am I?")
        messages = fake.requests[-1]["messages"]
        assert [m["role"] for m in messages] == ["system", "user"]  # no summary, no window
        assert messages[-1]["content"] == "Ann: who am I?"
        # Nothing from before the reset is due for a summary any more.
        requests = len(fake.requests)
        assert not await rt.summary.run("cli-r")
        assert len(fake.requests) == requests
        summary = rt.store.files("cli-r").read_summary()
        assert summary is not None and summary.text == ""
        assert summary.cursor == (await rt.store.recent_messages("cli-r", 4))[-3].id
    finally:
        await rt.close()


async def test_usage_counts_cache_reads_and_writes(fake: FakeOpenAI, runtime: Runtime) -> None:
    fake.script(
        Text(
            "cached",
            usage={
                "prompt_tokens": 120,
                "prompt_tokens_details": {"cached_tokens": 80, "cache_write_tokens": 30},
            },
        )
    )
    await ask(runtime.router, "cli-u", "hello")

    def work(session: Session) -> tuple[int, int, int]:
        row = (
            session.connection()
            .execute(text("SELECT input, cache_read, cache_write FROM usage ORDER BY id DESC"))
            .first()
        )
        assert row is not None
        return row[0], row[1], row[2]

    assert await runtime.store.db.read(work) == (120, 80, 30)


def test_anthropic_style_usage_counts_cache_writes_as_input() -> None:
    from gateway.agents.openai import _usage

    usage = _usage(
        "claude-sonnet",
        {
            "input_tokens": 10,
            "cache_creation_input_tokens": 40,
            "cache_read_input_tokens": 500,
            "output_tokens": 7,
        },
        elapsed_ms=12,
        call_ids=["c1"],
    )
    assert (usage.input, usage.cache_write, usage.cache_read, usage.output) == (50, 40, 500, 7)
    assert usage.tool_calls == ("c1",)
    odd = _usage("m", {"prompt_tokens": "many", "prompt_tokens_details": None}, 0, [])
    assert (odd.input, odd.cache_read) == (0, 0)  # nonsense from a provider is not a crash


async def test_messages_not_folded_yet_stay_in_sight(fake: FakeOpenAI, tmp_path: Path) -> None:
    # A window of 4 folds 2 at a time: until a pair has left the window, the model still
    # sees it next to the window, not neither in the window nor in the summary.
    rt = await start(fake, tmp_path / "h", history_window=4)
    rt.engine.runner.after_task.clear()  # no fold runs: everything past the window is unfolded
    try:
        fake.script(*(Text(f"answer {n}") for n in range(4)))
        for n in range(3):
            await ask(rt.router, "cli-w", f"question {n}")
        await ask(rt.router, "cli-w", "question 3")
        contents = [m["content"] for m in fake.requests[-1]["messages"][1:]]
        assert contents[0] == "Ann: question 0"  # six messages back: outside the window of 4
        assert len(contents) == 7
    finally:
        await rt.close()


async def test_window_is_read_from_history_json(fake: FakeOpenAI, runtime: Runtime) -> None:
    fake.script(Text("first answer"), Text("second answer"))
    await ask(runtime.router, "cli-h", "first question")
    # What history.json holds is the window, e.g. after an operator pruned it by hand.
    history = runtime.store.files("cli-h").history
    await asyncio.to_thread(
        history.replace, [HistoryMessage("user", "pruned context", 1, "Operator")]
    )
    await ask(runtime.router, "cli-h", "second question")
    messages = fake.requests[-1]["messages"]
    assert [m["content"] for m in messages[1:]] == [
        "Operator: pruned context",
        "Ann: second question",
    ]
    # The archive keeps everything regardless.
    archived = [m.content for m in await runtime.store.recent_messages("cli-h", 10)]
    assert archived[:2] == ["first question", "first answer"]


async def test_stream_cut_mid_answer_is_retried_without_repeating_text(
    fake: FakeOpenAI, clocked: tuple[Runtime, FakeClock]
) -> None:
    runtime, clock = clocked
    answer = "The build is green and the release can go out tonight."
    fake.script(Cut(answer, pieces=4), Text(answer))
    _sub, state = await ask_through_backoffs(runtime, clock, "cli-cut", "status?")
    assert (state.status, state.reply) == ("done", answer)
    assert len(fake.requests) == 2
    streamed = "".join(e.text for e in state.events if e.kind == "text_delta")
    assert streamed == answer  # what the first attempt showed is not shown twice


async def test_stream_that_keeps_getting_cut_is_a_clear_error(
    fake: FakeOpenAI, clocked: tuple[Runtime, FakeClock]
) -> None:
    runtime, clock = clocked
    fake.script(*[Cut("partial answer", pieces=1)] * 4)
    _sub, state = await ask_through_backoffs(runtime, clock, "cli-cut2", "status?")
    assert state.status == "error" and "not available" in state.error
    assert state.reply == ""  # a cut-off answer is never taken for the whole one


async def test_allow_listed_tool_then_asked_one_across_a_restart(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Replay keeps outbox chunk numbers where the first life had them: the allow-list's
    approval had no outbox entry then, so it takes no number now."""
    from store_rows import outbox_of_task
    from test_outbox_restart import CHAT, Sink

    home = tmp_path / "home"
    write = ToolCalls([("w1", "write_file", {"name": "notes.md", "content": "v1"})])
    delete = ToolCalls([("d1", "delete_file", {"name": "notes.md"})])
    # The first life gets as far as the asked delete; the second replays the whole run.
    fake.script(write, delete, write, delete, Text("Cleaned up."))

    first_sink = Sink()
    rt = await start(fake, home)
    rt.router.register_sink("chat", first_sink)
    await rt.store.ensure("dc-7")
    await rt.store.update("dc-7", allowed_tools=["write_file"])
    sub = await rt.router.submit(Inbound(CHAT, "dc-7", "tidy up"))
    state = await rt.router.wait(sub.task_hash, 15, until_prompt=True)
    assert state.prompt is not None and state.prompt.tool == "delete_file"
    await first_sink.until("confirm")
    await rt.close()  # gone with the delete still asked

    second_sink = Sink()
    rt = await start(fake, home)
    rt.router.register_sink("chat", second_sink)
    try:
        assert await rt.router.recover() == 1
        state = await rt.router.wait(sub.task_hash, 15, until_prompt=True)
        assert state.prompt is not None and state.prompt.tool == "delete_file"
        await rt.router.answer("dc-7", sub.task_hash, CHAT, approve=True)
        state = await rt.router.wait(sub.task_hash, 15)
        assert (state.status, state.reply) == ("done", "Cleaned up.")
        items = await outbox_of_task(rt.store.db, sub.task_hash)
        assert [(i.kind, i.chunk_index) for i in items] == [
            ("confirm", 0),  # asked by the first life
            ("confirm", 0),  # asked again, in the same place
            ("text", 1),
        ]
        assert second_sink.kinds() == ["confirm", "text"]
    finally:
        await rt.close()
