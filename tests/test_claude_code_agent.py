"""The claude-code agent through the router, driving a fake Claude Code CLI (fake_claude.py)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from patience import patient
from sqlalchemy import text
from sqlmodel import Session
from structlog.testing import capture_logs

from gateway.agents.claude_code import ClaudeCodeAgent
from gateway.agents.claude_process import KILL_GRACE_SECONDS
from gateway.agents.claude_resume import fingerprint, resume_point
from gateway.agents.openai import BASE_INSTRUCTIONS, FORMATTING
from gateway.engine.router import Router
from gateway.engine.views import TaskView
from gateway.events import Event, Inbound, Origin
from gateway.runtime import Runtime, UnknownAgent
from gateway.settings import Settings
from gateway.store.files import resume_state_name

ANN = Origin("http", sender_id="ann", sender_name="Ann")
BOB = Origin("http", sender_id="bob", sender_name="Bob")
FAKE = Path(__file__).with_name("fake_claude.py")
EXE = shutil.which("agenvoy") or str(Path(sys.executable).with_name("agenvoy"))


@dataclass
class FakeCli:
    bin: Path
    log: Path

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        # A line the fake is still writing has no newline yet.
        lines = self.log.read_text().split("\n")[:-1]
        return [json.loads(line) for line in lines]

    async def started(self, count: int, within: float = 15.0) -> list[dict[str, Any]]:
        """The calls, once at least `count` CLI processes have started."""
        deadline = asyncio.get_running_loop().time() + within
        while len(calls := self.calls()) < count:
            assert asyncio.get_running_loop().time() < deadline, "the fake CLI never started"
            await asyncio.sleep(0.02)
        return calls


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeCli:
    # A wrapper, so the fake runs under this interpreter whatever `python3` is on PATH.
    wrapper = tmp_path / "bin" / "claude"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    wrapper.chmod(0o755)
    log = tmp_path / "claude-calls.jsonl"
    monkeypatch.setenv("FAKE_CLAUDE_LOG", str(log))
    # The CLI sees only what it needs of the environment; the fake's own variables too.
    monkeypatch.setenv("AGENVOY_CLAUDE_CODE_ENV", "FAKE_CLAUDE_*")
    monkeypatch.delenv("FAKE_CLAUDE_FORGET", raising=False)
    return FakeCli(wrapper, log)


async def start(cli: FakeCli, home: Path, **extra: Any) -> Runtime:
    options: dict[str, Any] = {
        "home": home,
        "agent": "claude-code",
        "claude_code_bin": str(cli.bin),
        "model": "sonnet",
        **extra,
    }
    settings = Settings(_env_file=None, **options)
    return await Runtime.start(settings)


@pytest.fixture
async def runtime(cli: FakeCli, tmp_path: Path) -> AsyncIterator[Runtime]:
    rt = await start(cli, tmp_path / "home")
    try:
        yield rt
    finally:
        await rt.close()


async def ask(router: Router, sid: str, message: str, origin: Origin = ANN) -> TaskView:
    sub = await router.submit(Inbound(origin, sid, message))
    assert sub.task_hash
    return await router.wait(sub.task_hash, patient(15))


async def wait_for_event(router: Router, task_hash: str, seen: Callable[[Event], bool]) -> None:
    async def scan() -> None:
        async for event in router.stream(task_hash):
            if seen(event):
                return

    await asyncio.wait_for(scan(), 15)


def resume_files(rt: Runtime, sid: str) -> dict[str, dict[str, Any]]:
    folder = rt.settings.sessions_dir / sid / ".claude_code"
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def resumed(call: dict[str, Any]) -> str | None:
    """The session a CLI call resumed, None for a fresh start."""
    argv: list[str] = call["argv"]
    return argv[argv.index("--resume") + 1] if "--resume" in argv else None


def system_prompt_of(call: dict[str, Any]) -> str:
    argv: list[str] = call["argv"]
    return argv[argv.index("--append-system-prompt") + 1]


async def usage_rows(rt: Runtime) -> list[tuple[Any, ...]]:
    def work(session: Session) -> list[tuple[Any, ...]]:
        res = session.connection().execute(
            text(
                "SELECT model, input, output, cache_read, cache_write, elapsed_ms, tool_calls "
                "FROM usage ORDER BY id"
            )
        )
        return [tuple(r) for r in res.all()]

    return await rt.store.db.read(work)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def wait_gone(pid: int, within: float = 10.0) -> bool:
    """Whether the process exited and was reaped (no zombie left) within `within` seconds."""
    deadline = asyncio.get_running_loop().time() + within
    while not gone(pid):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_answer_resume_file_and_usage(cli: FakeCli, runtime: Runtime) -> None:
    state = await ask(runtime.router, "cli-a", "hello there")
    assert (state.status, state.reply) == ("done", "echo: Ann: hello there")
    deltas = [e.text for e in state.events if e.kind == "text_delta"]
    assert deltas == ["echo: ", "Ann: hello there"]

    (call,) = cli.calls()
    argv = call["argv"]
    assert argv[:4] == ["-p", "--output-format", "stream-json", "--verbose"]
    assert argv[argv.index("--model") + 1] == "sonnet" and "--resume" not in argv
    assert call["stdin"] == "Ann: hello there"
    workspace = runtime.store.files("cli-a").dir / "workspace"
    assert Path(call["cwd"]) == workspace and workspace.is_dir()
    system = system_prompt_of(call)
    assert BASE_INSTRUCTIONS in system and FORMATTING["http"] in system

    name = resume_state_name("sonnet", system, with_tools=True)
    assert resume_files(runtime, "cli-a") == {
        name: {
            "session_id": call["session_id"],
            # the fingerprints of exactly what the session stored: the question and the answer
            "fingerprints": [
                fingerprint(m.role, m.sender, m.content)
                for m in await runtime.store.recent_messages("cli-a")
            ],
            "last_answer": "echo: Ann: hello there",
        }
    }
    assert resume_files(runtime, "cli-a")[name]["fingerprints"] == [
        fingerprint("user", "Ann", "hello there"),
        fingerprint("assistant", "claude-code", "echo: Ann: hello there"),
    ]
    # input counts the cache writes (10 + 40); cache reads are reported on their own
    # under the model id the alias resolved to, not the alias
    assert await usage_rows(runtime) == [("claude-sonnet-5-5", 50, 5, 100, 40, 1234, "[]")]


async def test_next_task_resumes_with_only_what_is_new(cli: FakeCli, runtime: Runtime) -> None:
    router = runtime.router
    await ask(router, "tg--5", "first")
    first = cli.calls()[0]
    state = await ask(router, "tg--5", "second")
    assert state.reply == "echo: Ann: second"
    second = cli.calls()[1]
    assert resumed(second) == first["session_id"]
    assert second["stdin"] == "Ann: second"

    # Chatter recorded between tasks is new to the CLI too, and goes with the new message.
    await router.record(Inbound(BOB, "tg--5", "I prefer tea"))
    await ask(router, "tg--5", "what does Bob like?")
    third = cli.calls()[2]
    assert resumed(third) == first["session_id"]
    assert third["stdin"] == "Bob: I prefer tea\nAnn: what does Bob like?"
    (saved,) = resume_files(runtime, "tg--5").values()
    assert saved["last_answer"] == "echo: Ann: what does Bob like?"
    assert len(saved["fingerprints"]) == 7  # 2 tasks, Bob, the question and its answer


async def test_resume_survives_a_sliding_window(cli: FakeCli, tmp_path: Path) -> None:
    rt = await start(cli, tmp_path / "home", history_window=2)
    rt.engine.runner.after_task.clear()  # no background summary calls in between
    try:
        for message in ("one", "two", "three"):
            assert (await ask(rt.router, "cli-w", message)).status == "done"
        calls = cli.calls()
        assert [c["stdin"] for c in calls] == ["Ann: one", "Ann: two", "Ann: three"]
        assert all(resumed(c) == calls[0]["session_id"] for c in calls[1:])

        # More chatter than the window holds: the CLI missed messages it can no longer be sent
        # one by one, so it starts over from the window.
        for chatter in ("a", "b", "c"):
            await rt.router.record(Inbound(BOB, "cli-w", chatter))
        await ask(rt.router, "cli-w", "four")
        last = cli.calls()[-1]
        assert "--resume" not in last["argv"]
        assert last["stdin"] == "Conversation so far:\nBob: b\nBob: c\n\nNew message:\nAnn: four"
    finally:
        await rt.close()


async def test_resume_after_a_restart(cli: FakeCli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    rt = await start(cli, home)
    try:
        await ask(rt.router, "cli-r", "remember the number 7")
    finally:
        await rt.close()
    rt = await start(cli, home)
    try:
        state = await ask(rt.router, "cli-r", "which number?")
        assert state.status == "done"
    finally:
        await rt.close()
    first, second = cli.calls()
    assert resumed(second) == first["session_id"]
    assert second["stdin"] == "Ann: which number?"


async def test_changed_persona_starts_fresh_in_another_file(cli: FakeCli, runtime: Runtime) -> None:
    await ask(runtime.router, "cli-p", "hi")
    await runtime.store.update("cli-p", persona="a terse pirate")
    await ask(runtime.router, "cli-p", "hi again")
    first, second = cli.calls()
    assert "--resume" not in second["argv"]
    assert "a terse pirate" in system_prompt_of(second)
    assert second["stdin"] == (
        "Conversation so far:\nAnn: hi\nassistant: echo: Ann: hi\n\nNew message:\nAnn: hi again"
    )
    files = resume_files(runtime, "cli-p")
    names = {
        resume_state_name("sonnet", system_prompt_of(c), with_tools=True): c
        for c in (first, second)
    }
    assert set(files) == set(names) and len(files) == 2
    for name, call in names.items():
        assert files[name]["session_id"] == call["session_id"]


async def test_cli_tools_are_reported(cli: FakeCli, runtime: Runtime) -> None:
    state = await ask(runtime.router, "cli-t", "!tool look around")
    assert state.reply == "echo: Ann: !tool look around"  # the text before the tools is not
    calls = [e for e in state.events if e.kind == "tool_call"]
    results = [e for e in state.events if e.kind == "tool_result"]
    assert [(c.call_id, c.tool, c.args) for c in calls] == [
        ("toolu_1", "Bash", {"command": "ls"}),
        ("toolu_2", "Read", {"file_path": "missing.txt"}),
    ]
    assert [(r.call_id, r.tool, r.status, r.result) for r in results] == [
        ("toolu_1", "Bash", "ok", "notes.txt"),
        ("toolu_2", "Read", "error", "File does not exist."),
    ]
    ((*_, tool_calls),) = await usage_rows(runtime)
    assert json.loads(tool_calls) == ["toolu_1", "toolu_2"]


async def test_unparseable_lines_are_logged_and_skipped(cli: FakeCli, runtime: Runtime) -> None:
    with capture_logs() as logs:
        state = await ask(runtime.router, "cli-g", "!garbage hello")
    assert (state.status, state.reply) == ("done", "echo: Ann: !garbage hello")
    skipped = [e["line"] for e in logs if "unparseable" in e["event"]]
    assert skipped == ["this is not json", "[1, 2, 3]"]


async def test_cli_failure_is_a_clear_error(cli: FakeCli, runtime: Runtime) -> None:
    state = await ask(runtime.router, "cli-x", "!fail please")
    assert state.status == "error"
    assert "simulated failure" in state.error and "fake claude: boom" in state.error
    messages = await runtime.store.recent_messages("cli-x")
    assert [m.content for m in messages] == ["!fail please"]
    assert resume_files(runtime, "cli-x") == {}

    state = await ask(runtime.router, "cli-x", "!crash")
    assert state.status == "error" and "exited with status 3" in state.error
    # the end of stderr, bounded: the last line is there, the first is not
    assert "fatal: the fake crashed" in state.error and "stack frame 0 " not in state.error
    assert len(state.error) < 700


async def test_max_turns_is_a_clear_error(cli: FakeCli, runtime: Runtime) -> None:
    state = await ask(runtime.router, "cli-n", "!maxturns go on")
    assert state.status == "error" and "error_max_turns" in state.error
    assert resume_files(runtime, "cli-n") == {}
    # What it spent before running out of turns is still recorded.
    assert [row[:3] for row in await usage_rows(runtime)] == [("claude-sonnet-5-5", 10, 5)]


async def test_allowed_write_runs_unasked(cli: FakeCli, runtime: Runtime) -> None:
    # `/allow Write` reaches the CLI as --allowedTools: it asks nobody, and the file is written.
    await runtime.router.submit(Inbound(ANN, "cli-d", "/allow Write"))
    state = await ask(runtime.router, "cli-d", "!write now")
    assert not [e for e in state.events if e.kind == "confirm"]
    (result,) = [e for e in state.events if e.kind == "tool_result"]
    assert (result.tool, result.status) == ("Write", "ok")
    assert (runtime.store.files("cli-d").dir / "workspace" / "notes.txt").read_text() == "hello\n"


async def test_forgotten_session_is_retried_fresh(
    cli: FakeCli, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ask(runtime.router, "cli-f", "hello")
    old = cli.calls()[0]["session_id"]
    monkeypatch.setenv("FAKE_CLAUDE_FORGET", old)
    state = await ask(runtime.router, "cli-f", "still there?")
    assert (state.status, state.reply) == ("done", "echo: Ann: still there?")
    refused, fresh = cli.calls()[1:]
    assert resumed(refused) == old
    assert "--resume" not in fresh["argv"]
    assert fresh["stdin"].startswith("Conversation so far:\nAnn: hello\n")
    (saved,) = resume_files(runtime, "cli-f").values()
    assert saved["session_id"] == fresh["session_id"] != old


async def test_cancel_stops_the_cli(cli: FakeCli, runtime: Runtime) -> None:
    router = runtime.router
    sub = await router.submit(Inbound(ANN, "cli-c", "!sleep"))
    # The fake gives no step before sleeping, so the cancel reaches the agent while it reads
    # the CLI's output.
    (call,) = await cli.started(1)
    assert not gone(call["pid"])
    assert await router.cancel("cli-c", sub.task_hash, by="Ann")
    state = await router.wait(sub.task_hash, 15)
    assert state.status == "canceled"
    assert gone(call["pid"])  # terminated and reaped before the task counted as canceled


async def test_cli_ignoring_sigterm_is_killed(cli: FakeCli, runtime: Runtime) -> None:
    agent = runtime.agent
    assert isinstance(agent, ClaudeCodeAgent)
    agent.clock = clock = FakeClock()
    sub = await runtime.router.submit(Inbound(ANN, "cli-k", "!stubborn"))
    (call,) = await cli.started(1)
    assert await runtime.router.cancel("cli-k")
    await clock.until_sleeping(seconds=KILL_GRACE_SECONDS)  # SIGTERM sent, the grace runs
    assert not gone(call["pid"])
    await clock.advance(KILL_GRACE_SECONDS)
    state = await runtime.router.wait(sub.task_hash, 15)
    assert state.status == "canceled" and gone(call["pid"])


async def test_cancel_between_steps_still_stops_the_cli(cli: FakeCli, runtime: Runtime) -> None:
    router = runtime.router
    sub = await router.submit(Inbound(ANN, "cli-b", "!busy"))
    # Cancelled while the router handles a step, the agent is left suspended at a yield.
    await wait_for_event(router, sub.task_hash, lambda e: e.kind == "text_delta")
    (call,) = cli.calls()
    assert await router.cancel("cli-b", sub.task_hash)
    assert (await router.wait(sub.task_hash, 15)).status == "canceled"
    assert await wait_gone(call["pid"])


async def test_missing_binary_is_a_start_up_error(tmp_path: Path) -> None:
    settings = Settings(
        _env_file=None,
        home=tmp_path / "home",
        agent="claude-code",
        claude_code_bin=str(tmp_path / "no-such-claude"),
    )
    with pytest.raises(UnknownAgent, match="AGENVOY_CLAUDE_CODE_BIN"):
        await Runtime.start(settings)


@pytest.mark.slow
async def test_agenvoy_run_names_the_setting(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "AGENVOY_HOME": str(tmp_path / "home"),
        "AGENVOY_AGENT": "claude-code",
        "AGENVOY_CLAUDE_CODE_BIN": "no-such-claude-binary",
    }
    proc = await asyncio.create_subprocess_exec(
        EXE,
        "run",
        env=env,
        cwd=tmp_path,  # no .env of the developer's
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "cannot start" in err.decode() and "AGENVOY_CLAUDE_CODE_BIN" in err.decode()


async def test_model_that_looks_like_an_option_is_refused(cli: FakeCli, runtime: Runtime) -> None:
    await runtime.store.ensure("cli-m")
    await runtime.store.update("cli-m", model="--dangerously-skip-permissions")
    state = await ask(runtime.router, "cli-m", "hi")
    assert state.status == "error" and "is not a model name" in state.error
    assert cli.calls() == []


def test_resume_point_rule() -> None:
    saved = ["u1", "r1", "u2", "r2"]
    assert resume_point(saved, ["u1", "r1", "u2", "r2"]) == 4  # nothing new before the message
    assert resume_point(saved, ["u2", "r2", "x"]) == 2  # the window slid: the tails agree
    assert resume_point(saved, ["r0", "u1", "r1", "u2", "r2"]) == 5  # a wider window
    assert resume_point(saved, ["x", "r2"]) is None  # disagrees where both cover
    assert resume_point(saved, ["y", "z"]) is None  # slid past what the CLI saw
    assert resume_point([], ["u1"]) is None
    # the same answer twice: the newest place where the lists agree wins
    assert resume_point(["u", "ok"], ["u", "ok", "u", "ok", "v"]) == 4


async def test_allowed_tools_reach_the_cli(cli: FakeCli, runtime: Runtime) -> None:
    await ask(runtime.router, "cli-t", "no permissions yet")
    assert "--allowedTools" not in cli.calls()[0]["argv"]
    for command in ("/allow Edit", "/allow Bash", "/allow Everything", "/allow Bash(rm:*)"):
        await runtime.router.submit(Inbound(ANN, "cli-t", command))
    # Only the CLI's own tools can be let run unasked; nothing else reaches --allowedTools.
    assert (await runtime.store.require("cli-t")).allowed_tools == {"Edit", "Bash"}
    await ask(runtime.router, "cli-t", "now edit")
    argv = cli.calls()[1]["argv"]
    assert argv[argv.index("--allowedTools") + 1] == "Bash,Edit"


async def test_summary_is_one_tool_less_cli_call(
    cli: FakeCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = await start(cli, tmp_path / "home", history_window=2, summary_model="haiku")
    rt.engine.runner.after_task.clear()  # the summary runs when the test says so
    try:
        for message in ("one", "two"):
            await ask(rt.router, "cli-s", message)
        assert rt.summary is not None and await rt.summary.run("cli-s")
        summary_call = cli.calls()[-1]
        argv = summary_call["argv"]
        assert argv[argv.index("--model") + 1] == "haiku"
        assert argv[argv.index("--max-turns") + 1] == "1" and "--resume" not in argv
        assert "Ann: one" in summary_call["stdin"] and "Ann: two" not in summary_call["stdin"]
        workspace = rt.store.files("cli-s").dir / "workspace"
        assert Path(summary_call["cwd"]) != workspace
        assert not await asyncio.to_thread(Path(summary_call["cwd"]).exists)  # scratch is gone
        summary = rt.store.files("cli-s").read_summary()
        assert summary is not None and summary.text.startswith("echo: ")
        # A fresh start later carries the summary to the CLI.
        await rt.store.update("cli-s", persona="someone new")
        await ask(rt.router, "cli-s", "three")
        assert cli.calls()[-1]["stdin"].startswith("Summary of the earlier conversation:")

        # A failing summary call leaves the summary where it was.
        monkeypatch.setenv("FAKE_CLAUDE_FAIL_SUMMARY", "1")
        await ask(rt.router, "cli-s", "four")
        cli_calls = len(cli.calls())
        assert not await rt.summary.run("cli-s")
        assert len(cli.calls()) > cli_calls
        assert rt.store.files("cli-s").read_summary() == summary
    finally:
        await rt.close()


async def test_reasoning_level_reaches_the_cli(cli: FakeCli, runtime: Runtime) -> None:
    await runtime.store.ensure("cli-e")
    await runtime.store.update("cli-e", reasoning="high")
    await ask(runtime.router, "cli-e", "think")
    argv = cli.calls()[-1]["argv"]
    assert argv[argv.index("--effort") + 1] == "high"
