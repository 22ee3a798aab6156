"""The claude-code agent against the real Claude Code CLI and the fake one (fake_claude.py).

The real CLI (npm `@anthropic-ai/claude-code`, installed by `.ci/run` under
`.tools/claude-code/`, or named by `AGENVOY_TEST_CLAUDE_BIN`) talks to the fake Messages API
(`ANTHROPIC_BASE_URL`), with a HOME of its own and no traffic beyond loopback. Each test scripts
that API for the real CLI; the fake CLI acts on words of the message instead (`!write`, `!env`,
`!agent`) and is told through its own variables what the API would have refused. Where the
two differ in what they can show (the fake counts no real tokens), the test says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakes.anthropic import Error, FakeAnthropic, Slow, Text, ToolUse
from fakes.telegram import FakeTelegram
from support import skip_or_fail
from telegram_rig import Rig, last_task_of, reply_in, start_rig, stop_rig
from test_claude_code_agent import ANN, ask, usage_rows

from gateway.events import Inbound
from gateway.runtime import Runtime
from gateway.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
FAKE = Path(__file__).with_name("fake_claude.py")
REAL = Path(
    os.environ.get("AGENVOY_TEST_CLAUDE_BIN")
    or ROOT / ".tools" / "claude-code" / "node_modules" / ".bin" / "claude"
)
# What the gateway holds that the CLI must never see.
SECRETS = {
    "AGENVOY_API_TOKEN": "gateway-api-token-secret",
    "AGENVOY_TELEGRAM_TOKEN": "123:telegram-bot-secret",
    "PGPASSWORD": "db-password-secret",
    "OPENAI_API_KEY": "sk-openai-secret",
}


@dataclass
class Cli:
    """One CLI under test, and the fake Messages API the real one talks to."""

    kind: str  # "fake" or "real"
    bin: Path
    api: FakeAnthropic
    home: Path  # the CLI's HOME

    @property
    def real(self) -> bool:
        return self.kind == "real"

    @property
    def marker(self) -> bytes:
        """A variable only this test's CLI processes (and what they start) have."""
        if self.real:
            return f"ANTHROPIC_BASE_URL={self.api.url}".encode()
        return f"FAKE_CLAUDE_LOG={os.environ['FAKE_CLAUDE_LOG']}".encode()

    def processes(self) -> dict[int, list[bytes]]:
        """The environment of each live process of this test's CLI (from /proc)."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                env = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue  # gone meanwhile, or not ours to read
            if self.marker in env and state != "Z":
                found[int(entry.name)] = env
        return found

    def script(self, *replies: Any) -> None:
        """What the API answers the real CLI (the fake CLI ignores the API)."""
        if self.real:
            self.api.script(*replies)

    def options(self) -> dict[str, Any]:
        return {
            "agent": "claude-code",
            "claude_code_bin": str(self.bin),
            "model": "sonnet",
            "claude_code_env": "FAKE_CLAUDE_*",
        }


@pytest.fixture(params=["fake", "real"])
async def claude(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Cli]:
    home = tmp_path / "claude-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    async with FakeAnthropic() as api:
        if request.param == "real":
            if not os.access(REAL, os.X_OK):
                skip_or_fail(
                    f"the Claude Code CLI is not installed at {REAL} (`npm install --prefix "
                    ".tools/claude-code @anthropic-ai/claude-code`, as .ci/run does)"
                )
            monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", api.api_key)
            # Nothing beyond loopback: no telemetry, no update checks.
            monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            yield Cli("real", REAL, api, home)
            return
        wrapper = tmp_path / "bin" / "claude"
        wrapper.parent.mkdir()
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
        wrapper.chmod(0o755)
        monkeypatch.setenv("FAKE_CLAUDE_LOG", str(tmp_path / "claude-calls.jsonl"))
        monkeypatch.delenv("FAKE_CLAUDE_API_ERROR", raising=False)
        monkeypatch.delenv("FAKE_CLAUDE_FORGET", raising=False)
        yield Cli("fake", wrapper, api, home)


async def start(claude: Cli, home: Path, **extra: Any) -> Runtime:
    options = {"home": home, **claude.options(), **extra}
    return await Runtime.start(Settings(_env_file=None, **options))  # type: ignore[call-arg]


@pytest.fixture
async def runtime(claude: Cli, tmp_path: Path) -> AsyncIterator[Runtime]:
    rt = await start(claude, tmp_path / "home")
    rt.router.after_task.clear()  # no summaries in between: each CLI call is the test's
    try:
        yield rt
    finally:
        await rt.close()


@pytest.fixture
async def telegram(claude: Cli, tmp_path: Path) -> AsyncIterator[Rig]:
    async with FakeTelegram() as fake:
        rig = await start_rig(fake, tmp_path / "home", **claude.options())
        rig.runtime.router.after_task.clear()
        try:
            yield rig
        finally:
            await stop_rig(rig)


def workspace(runtime: Runtime, sid: str) -> Path:
    return runtime.store.files(sid).dir / "workspace"


async def ask_to_write(claude: Cli, rig: Rig, chat: int) -> tuple[dict[str, Any], Path]:
    """Ann asks the bot in group `chat` for a Write; returns the prompt it posts, and the file."""
    fake = rig.fake
    group = fake.group(chat, "ops")
    ann = fake.user(41, "Ann")
    notes = workspace(rig.runtime, f"tg-{chat}") / "notes.txt"
    claude.script(
        ToolUse([("toolu_w", "Write", {"file_path": str(notes), "content": "hello\n"})]),
        Text("wrote it"),
    )
    fake.inject_message(group, ann, f"@{fake.bot_user['username']} !write notes please")
    prompt = await fake.wait_for_call(
        "sendMessage", lambda p: "reply_markup" in p and p.get("chat_id") == chat, timeout=30
    )
    assert "Write" in prompt["text"] and "notes.txt" in prompt["text"]
    assert not notes.exists()  # nothing ran before the answer
    return prompt, notes


def button(prompt: dict[str, Any], text: str) -> str:
    buttons = prompt["reply_markup"]["inline_keyboard"][0]
    return str(next(b for b in buttons if b["text"] == text)["callback_data"])


async def test_write_asks_in_the_group_and_runs_once_approved(claude: Cli, telegram: Rig) -> None:
    fake = telegram.fake
    prompt, notes = await ask_to_write(claude, telegram, -300)
    posted = fake.sent_messages(-300)[-1]
    # Someone else in the group cannot approve it; the requester can.
    fake.inject_callback(fake.user(42, "Bob"), posted, button(prompt, "Approve"))
    refusal = await fake.wait_for_call("answerCallbackQuery", timeout=10)
    assert "Ann" in refusal["text"] and not notes.exists()
    fake.inject_callback(fake.user(41, "Ann"), posted, button(prompt, "Approve"))
    await reply_in(fake, -300, "wrote it" if claude.real else "echo:", within=30)
    task = await telegram.runtime.router.wait(await last_task_of(telegram, "tg--300"), 10)
    assert task.status == "done" and notes.read_text() == "hello\n"


async def test_write_denied_in_the_group_is_refused(claude: Cli, telegram: Rig) -> None:
    fake = telegram.fake
    prompt, notes = await ask_to_write(claude, telegram, -301)
    claude.script(Text("as you wish"))
    posted = fake.sent_messages(-301)[-1]
    fake.inject_callback(fake.user(41, "Ann"), posted, button(prompt, "Deny"))
    await reply_in(fake, -301, "wrote it" if claude.real else "echo:", within=30)
    assert not notes.exists()
    task = await telegram.runtime.router.wait(await last_task_of(telegram, "tg--301"), 10)
    (result,) = [e for e in task.events if e.kind == "tool_result"]
    assert (result.tool, result.status) == ("Write", "error")  # type: ignore[union-attr]
    assert "denied" in result.result  # type: ignore[union-attr]


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
    (first,) = [json.loads(p.read_text()) for p in resume_files(runtime, "cli-f")]
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
    (second,) = [json.loads(p.read_text()) for p in resume_files(runtime, "cli-f")]
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
        (saved,) = [json.loads(p.read_text()) for p in resume_files(rt, "cli-r")]
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
        first, second = [json.loads(line) for line in calls_of(tmp_path)]
        assert second["argv"][second["argv"].index("--resume") + 1] == first["session_id"]
        assert second["stdin"] == "Ann: which number?"


async def test_forgotten_cli_session_starts_fresh(
    claude: Cli, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude.script(Text("hello to you"), Text("fresh here"))
    assert (await ask(runtime.router, "cli-g", "hello")).status == "done"
    (first,) = [json.loads(p.read_text()) for p in resume_files(runtime, "cli-g")]
    # The CLI's transcript is gone (another machine, a cleaned HOME).
    for transcript in claude.home.rglob(f"{first['session_id']}.jsonl"):
        transcript.unlink()
    monkeypatch.setenv("FAKE_CLAUDE_FORGET", first["session_id"])
    state = await ask(runtime.router, "cli-g", "still there?")
    assert state.status == "done", state.error
    assert state.reply == ("fresh here" if claude.real else "echo: Ann: still there?")
    (second,) = [json.loads(p.read_text()) for p in resume_files(runtime, "cli-g")]
    assert second["session_id"] != first["session_id"]
    # The refused resume spent nothing: no usage row for it.
    rows = await usage_rows(runtime)
    assert len(rows) == 2 and all(row[1] or row[2] or row[3] for row in rows)


def calls_of(tmp_path: Path) -> list[str]:
    return (tmp_path / "claude-calls.jsonl").read_text().splitlines()


def resume_files(runtime: Runtime, sid: str) -> list[Path]:
    return sorted((runtime.settings.sessions_dir / sid / ".claude_code").glob("*.json"))


async def test_cli_environment_holds_no_gateway_secret(claude: Cli, runtime: Runtime) -> None:
    # Bash is let run unasked: this test is about what it can see.
    await runtime.router.submit(Inbound(ANN, "cli-e", "/allow Bash"))
    claude.script(ToolUse([("toolu_env", "Bash", {"command": "env"})]), Text("that is all"))
    state = await ask(runtime.router, "cli-e", "!env show me")
    assert state.status == "done", state.error
    (result,) = [e for e in state.events if e.kind == "tool_result"]
    shown: str = result.result  # type: ignore[union-attr]
    assert result.status == "ok" and "PATH=" in shown  # type: ignore[union-attr]
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
    rt.router.after_task.clear()
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
            argv = json.loads((tmp_path / "claude-calls.jsonl").read_text().splitlines()[-1])[
                "argv"
            ]
            assert argv[argv.index("--tools") + 1] == "" and "--no-session-persistence" in argv
    finally:
        await rt.close()


async def test_default_reasoning_level_reaches_the_cli(claude: Cli, tmp_path: Path) -> None:
    rt = await start(claude, tmp_path / "home", reasoning="high")
    rt.router.after_task.clear()
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
            calls = (tmp_path / "claude-calls.jsonl").read_text().splitlines()
            argv = json.loads(calls[-1])["argv"]
            assert argv[argv.index("--effort") + 1] == "high"
    finally:
        await rt.close()
