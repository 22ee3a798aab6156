"""The claude-code agent against the real Claude Code CLI and the fake one (claude_rig): what
the CLI is told, what it may see, what it spent, and how its failures end."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from claude_rig import SECRETS, Cli, calls_of, claude, resume_files, runtime, start
from fakes.anthropic import Error, Slow, Text, ToolUse
from test_claude_code_agent import ANN, ask, usage_rows

from gateway.events import Inbound
from gateway.runtime import Runtime

__all__ = ["claude", "runtime"]  # the fixtures, parametrized over the fake CLI and the real one


async def test_usage_rows_carry_subagent_tokens_and_the_resolved_model(
    claude: Cli, runtime: Runtime
) -> None:
    agent = {"description": "count", "prompt": "count the files", "subagent_type": "Explore"}
    claude.script(
        ToolUse([("toolu_agent", "Agent", agent)]),
        Text("Counting in the background."),
        Text("There are 3 files."),
        Text("There are 3 files, I hear."),
    )
    state = await ask(runtime.router, "cli-u", "!agent count the files")
    assert state.status == "done", state.error
    # The CLI answers once before the background subagent reports and once after: both count.
    assert state.reply.startswith("Counting in the background.")
    assert state.reply.endswith("I hear." if claude.real else "echo: Ann: !agent count the files")
    rows = await usage_rows(runtime)
    models = {row[0] for row in rows}
    assert "sonnet" not in models and all(m.startswith("claude-") for m in models)
    if claude.real:
        # Every answer the API gave this run, the subagent's included, is in the rows.
        assert sum(row[2] for row in rows) == sum(claude.api.output_counts)
        assert len(claude.api.output_counts) >= 3
    else:
        assert {r[0]: r[2] for r in rows} == {"claude-sonnet-5-5": 5, "claude-haiku-4-5": 3}
    # One row per model; the run's time and tool calls go with the main model's.
    assert len(rows) == len(models)
    assert sum(1 for row in rows if "toolu_agent" in row[6]) == 1


async def test_failed_resume_starts_fresh_without_the_cli_error_text(
    claude: Cli, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude.script(Text("hello to you"))
    assert (await ask(runtime.router, "cli-f", "hello")).status == "done"
    (first,) = resume_files(runtime, "cli-f")
    # The API now refuses the resumed conversation (it holds an earlier answer); a fresh one
    # (a single user turn) goes through.
    claude.api.refuse(
        lambda body: any(m.get("role") == "assistant" for m in body["messages"]),
        Error(400, "messages.1.content.0: unexpected `tool_use_id`"),
    )
    monkeypatch.setenv("FAKE_CLAUDE_API_ERROR", first["session_id"])
    claude.script(Text("starting over"))
    state = await ask(runtime.router, "cli-f", "still there?")
    assert state.status == "done", state.error
    assert state.reply == ("starting over" if claude.real else "echo: Ann: still there?")
    shown = [getattr(e, "text", "") for e in state.events]
    assert not any("API Error" in text for text in shown)
    (second,) = resume_files(runtime, "cli-f")
    assert second["session_id"] != first["session_id"]
    # The refused attempt spent nothing, so it has no usage row.
    assert all(row[1] or row[2] or row[3] for row in await usage_rows(runtime))


async def test_resume_after_a_restart_sends_only_what_is_new(claude: Cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    claude.script(Text("seven it is"), Text("you said seven"))
    rt = await start(claude, home)
    try:
        assert (await ask(rt.router, "cli-r", "remember the number 7")).status == "done"
    finally:
        await rt.close()
    rt = await start(claude, home)
    try:
        state = await ask(rt.router, "cli-r", "which number?")
        assert state.status == "done", state.error
        (saved,) = resume_files(rt, "cli-r")
        outputs = [row[2] for row in await usage_rows(rt)]
    finally:
        await rt.close()
    # A resumed session's totals include the earlier process's spend: each row has only its own.
    assert sum(outputs) == (sum(claude.api.output_counts) if claude.real else 10)
    assert len(outputs) == 2
    if claude.real:
        # The CLI sent its own transcript: the first answer, then only the new message.
        last = json.dumps(claude.api.requests[-1]["messages"])
        assert "seven it is" in last and "Ann: which number?" in last
        assert "Conversation so far" not in last
        assert saved["last_answer"] == "you said seven"
    else:
        first, second = calls_of(tmp_path)
        assert second["argv"][second["argv"].index("--resume") + 1] == first["session_id"]
        assert second["stdin"] == "Ann: which number?"


async def test_forgotten_cli_session_starts_fresh(
    claude: Cli, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude.script(Text("hello to you"), Text("fresh here"))
    assert (await ask(runtime.router, "cli-g", "hello")).status == "done"
    (first,) = resume_files(runtime, "cli-g")
    # The CLI's transcript is gone (another machine, a cleaned HOME).
    for transcript in claude.home.rglob(f"{first['session_id']}.jsonl"):
        transcript.unlink()
    monkeypatch.setenv("FAKE_CLAUDE_FORGET", first["session_id"])
    state = await ask(runtime.router, "cli-g", "still there?")
    assert state.status == "done", state.error
    assert state.reply == ("fresh here" if claude.real else "echo: Ann: still there?")
    (second,) = resume_files(runtime, "cli-g")
    assert second["session_id"] != first["session_id"]
    # The refused resume spent nothing: no usage row for it.
    rows = await usage_rows(runtime)
    assert len(rows) == 2 and all(row[1] or row[2] or row[3] for row in rows)


async def test_cli_environment_holds_no_gateway_secret(claude: Cli, runtime: Runtime) -> None:
    # Bash is let run unasked: this test is about what it can see.
    await runtime.router.submit(Inbound(ANN, "cli-e", "/allow Bash"))
    claude.script(ToolUse([("toolu_env", "Bash", {"command": "env"})]), Text("that is all"))
    state = await ask(runtime.router, "cli-e", "!env show me")
    assert state.status == "done", state.error
    (result,) = [e for e in state.events if e.kind == "tool_result"]
    shown: str = result.result
    assert result.status == "ok" and "PATH=" in shown
    for name, value in SECRETS.items():
        assert name not in shown and value not in shown
    assert "AGENVOY_" not in shown


async def test_cancel_stops_the_cli_and_its_environment_is_clean(
    claude: Cli, runtime: Runtime
) -> None:
    claude.script(Slow(3, Text("too late")))
    sub = await runtime.router.submit(Inbound(ANN, "cli-c", "!sleep"))
    deadline = asyncio.get_running_loop().time() + 30
    # The CLI at work: the real one waits for the API's answer, the fake one sleeps.
    while not (running := claude.processes()):
        assert asyncio.get_running_loop().time() < deadline, "the CLI never started"
        await asyncio.sleep(0.05)
    if claude.real:
        await claude.api.wait_for_request(timeout=30)
    for env in running.values():  # the CLI and its permission server, as /proc shows them
        assert not [v for v in env if v.startswith(b"AGENVOY_") and b"PERMISSION" not in v]
        assert not any(value.encode() in v for v in env for value in SECRETS.values())
    assert await runtime.router.cancel("cli-c", sub.task_hash)
    assert (await runtime.router.wait(sub.task_hash, 15)).status == "canceled"
    assert claude.processes() == {}  # stopped, with whatever it started


async def test_summary_has_no_tools_and_keeps_no_transcript(claude: Cli, tmp_path: Path) -> None:
    rt = await start(claude, tmp_path / "home", history_window=2, summary_model="haiku")
    rt.engine.runner.after_task.clear()
    try:
        claude.script(Text("one back"), Text("two back"))
        for message in ("one", "two"):
            await ask(rt.router, "cli-s", message)
        projects = claude.home / ".claude" / "projects"
        before = set(projects.rglob("*.jsonl")) if projects.exists() else set()
        claude.script(Text("Ann said one."))
        assert rt.summary is not None and await rt.summary.run("cli-s")
        summary = rt.store.files("cli-s").read_summary()
        assert summary is not None and summary.text
        after = set(projects.rglob("*.jsonl")) if projects.exists() else set()
        assert after == before  # no transcript of the summary call
        if claude.real:
            last = claude.api.requests[-1]
            assert not last.get("tools")
        else:
            argv = calls_of(tmp_path)[-1]["argv"]
            assert argv[argv.index("--tools") + 1] == "" and "--no-session-persistence" in argv
            assert "--strict-mcp-config" in argv and "--mcp-config" not in argv
    finally:
        await rt.close()


async def test_default_reasoning_level_reaches_the_cli(claude: Cli, tmp_path: Path) -> None:
    rt = await start(claude, tmp_path / "home", reasoning="high")
    rt.engine.runner.after_task.clear()
    try:
        claude.script(Text("thought about it", thinking="Weighing it up carefully."))
        state = await ask(rt.router, "cli-r", "think hard")
        assert state.status == "done", state.error
        # The CLI's thinking is never shown, nor part of the reply.
        shown = [getattr(e, "text", "") for e in state.events]
        assert not any("Weighing" in text or "Let me think" in text for text in shown)
        assert "Weighing" not in state.reply and "Let me think" not in state.reply
        if claude.real:
            (request,) = claude.api.requests
            assert request["output_config"]["effort"] == "high"
        else:
            argv = calls_of(tmp_path)[-1]["argv"]
            assert argv[argv.index("--effort") + 1] == "high"
    finally:
        await rt.close()
