"""The `claude-code` agent: the Claude Code CLI, one process per task, in streaming JSON mode.

The CLI runs in the session workspace with its own tools (files, shell, search); they run inside
the CLI, so the gateway reports them as tool calls and results instead of running them through
the router. Its system prompt gets the openai agent's one appended (base instructions, persona,
formatting note for the platform).

Resume. The CLI keeps a conversation on its side under a session id, so a task should send only
what that session has not seen yet. After every answered task the agent saves, per model and
system prompt (`<session>/.claude_code/<model>_<hash>.json`), the CLI session id, the
fingerprints of the messages that session has seen (the window it was given, the new message,
the reply) and the last answer. A fingerprint is a short sha256 of role, sender and content.

On the next task the conversation is the recent window plus the new message. The window slides
(it is bounded), so the saved list and the window need not start at the same message. The rule:
search the window, newest first, for a message whose fingerprint is the last saved one and at
which the two lists agree on everything they both cover (the saved list's tail against the
window up to that message). The CLI session has seen the window up to there: it is resumed
(`--resume`) and sent only the messages after that one plus the new message. Without such a
message (nothing saved, `/reset`, more messages since than the window holds, a rewritten
history) it starts fresh and is sent the summary, the whole window and the new message.

Rolling summaries are one more CLI call each, with the summary model, one turn (no tool use)
and an empty scratch directory; a fresh start sends the summary ahead of the window.

A changed persona or model gives another file, hence a fresh start. A resume the CLI refuses
(its session was deleted, or lives on another machine) is retried once fresh, provided nothing
of it reached the user yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.agents.base import (
    AgentContext,
    AgentFailed,
    Delta,
    Reply,
    Step,
    ToolCall,
    ToolResult,
    Usage,
)
from gateway.agents.openai import SUMMARY_INSTRUCTIONS, system_prompt
from gateway.logs import get_logger
from gateway.settings import Settings
from gateway.store.sessions import StoredMessage

log = get_logger(__name__)

# How long a stopped CLI gets to exit after SIGTERM before it is killed.
KILL_GRACE_SECONDS = 3.0
# How long the CLI may take to exit once its output ended (it closes MCP servers, saves state).
EXIT_GRACE_SECONDS = 10.0
# Longest stream-json line read; a tool result holding a whole file makes for long lines.
LINE_LIMIT = 32 * 1024 * 1024
STDERR_KEPT_BYTES = 8192
STDERR_SHOWN_CHARS = 500
# Tool output is journaled, logged and sent to clients, so it is cut; the CLI saw all of it.
TOOL_RESULT_CHARS = 8000
FINGERPRINT_CHARS = 16


class ClaudeCodeUnavailable(ValueError):
    """The CLI cannot be found; a start-up error."""


def fingerprint(role: str, sender: str, content: str) -> str:
    # Separated by NUL so that moving text between the fields changes the fingerprint.
    data = "\0".join((role, sender, content)).encode()
    return hashlib.sha256(data).hexdigest()[:FINGERPRINT_CHARS]


def resume_point(saved: Sequence[str], window: Sequence[str]) -> int | None:
    """How many leading messages of `window` the CLI session has seen; None: start fresh.

    `saved` are the fingerprints the session has seen, oldest first; `window` those of the
    recent messages before the new one. See the module docstring for the rule.
    """
    if not saved:
        return None
    last = saved[-1]
    for end in range(len(window), 0, -1):
        if window[end - 1] != last:
            continue
        overlap = min(len(saved), end)
        if list(saved[len(saved) - overlap :]) == list(window[end - overlap : end]):
            return end
    return None


@dataclass
class _Run:
    """What one CLI process produced."""

    session_id: str = ""
    produced: bool = False  # text or tool activity was passed on to the user
    turn_text: list[str] = field(default_factory=list)  # text since the last tool use
    reply: str = ""
    tool_names: dict[str, str] = field(default_factory=dict)
    call_ids: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None
    failure: str = ""


class ClaudeCodeAgent:
    name = "claude-code"

    def __init__(self, settings: Settings) -> None:
        found = shutil.which(settings.claude_code_bin)
        if found is None:
            raise ClaudeCodeUnavailable(
                f"the Claude Code CLI {settings.claude_code_bin!r} is not installed or not "
                "executable; install it or set AGENVOY_CLAUDE_CODE_BIN to its path"
            )
        self.settings = settings
        # Absolute: the CLI runs with the session workspace as its working directory.
        self.binary = os.path.abspath(found)
        self.kill_grace = KILL_GRACE_SECONDS

    async def run(self, ctx: AgentContext) -> AsyncIterator[Step]:
        model = ctx.model or self.settings.model
        if model.startswith("-"):  # the CLI would read it as an option
            raise AgentFailed(f"{model!r} is not a model name")
        system = system_prompt(ctx)
        window = list(ctx.history)[-self.settings.history_window :]
        seen = [fingerprint(m.role, m.sender, m.content) for m in window]
        conversation = [*seen, fingerprint("user", ctx.origin.sender_name, ctx.text)]
        new_message = _new_message(ctx)
        await asyncio.to_thread(ctx.workspace.mkdir, parents=True, exist_ok=True)

        run: _Run | None = None
        resume = _resumable(await ctx.read_resume_state(model, system, with_tools=True), seen)
        if resume is not None:
            cli_session, known = resume
            prompt = "\n".join([*(_line(m) for m in window[known:]), new_message])
            run = _Run()
            async for step in self._attempt(ctx, model, system, prompt, cli_session, run):
                yield step
            if run.failure and not run.produced:
                log.warning(
                    "the Claude Code CLI did not resume its session; starting fresh",
                    session=ctx.session_id,
                    cli_session=cli_session,
                    reason=run.failure,
                )
                run = None
        if run is None:
            run = _Run()
            prompt = _transcript(ctx.summary, window, new_message)
            async for step in self._attempt(ctx, model, system, prompt, None, run):
                yield step
        if run.failure:
            raise AgentFailed(run.failure)
        if run.reply:  # the router stores no empty reply, so it has no fingerprint either
            conversation.append(fingerprint("assistant", self.name, run.reply))
        state = {
            "session_id": run.session_id,
            "fingerprints": conversation,
            "last_answer": run.reply,
        }
        await ctx.write_resume_state(model, system, state, with_tools=True)
        yield Reply(run.reply)

    async def _attempt(
        self,
        ctx: AgentContext,
        model: str,
        system: str,
        prompt: str,
        resume: str | None,
        run: _Run,
    ) -> AsyncGenerator[Step, None]:
        """One CLI process for the task, fresh or resuming; what it produced lands in `run`."""
        args = self._task_args(ctx, model, system, resume)
        async with contextlib.aclosing(
            self._run_cli(args, ctx.workspace, prompt, run, model)
        ) as steps:
            async for step in steps:
                yield step

    def _task_args(
        self, ctx: AgentContext, model: str, system: str, resume: str | None
    ) -> list[str]:
        args = self._base_args(model, system)
        if resume is not None:
            args += ["--resume", resume]
        if ctx.allowed_tools:
            # `/allow <tool>` maps onto the CLI's own permission list (e.g. `Bash`, `Edit`).
            args += ["--allowedTools", ",".join(sorted(ctx.allowed_tools))]
        if ctx.reasoning:
            args += ["--effort", ctx.reasoning]
        return args

    def _base_args(self, model: str, system: str) -> list[str]:
        return [
            self.binary,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            model,
            "--append-system-prompt",
            system,
        ]

    async def summarize(self, previous: str, messages: Sequence[StoredMessage]) -> str:
        """Fold `messages` into `previous` with one tool-less CLI call (the summary model)."""
        model = self.settings.summary_model or self.settings.model
        lines = "\n".join(_line(m) for m in messages)
        prompt = f"Summary so far:\n{previous or '(none yet)'}\n\nNew messages:\n{lines}"
        # One turn: the answer is the summary, there is no room for tool use.
        args = [*self._base_args(model, SUMMARY_INSTRUCTIONS), "--max-turns", "1"]
        # An empty directory of its own: a summary has no business with any workspace.
        cwd = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="agenvoy-summary-"))
        run = _Run()
        try:
            async with contextlib.aclosing(self._run_cli(args, cwd, prompt, run, model)) as steps:
                async for _step in steps:
                    pass
        finally:
            await asyncio.to_thread(shutil.rmtree, cwd, True)
        if run.failure:
            raise AgentFailed(run.failure)
        if not run.reply:
            raise AgentFailed("the Claude Code CLI gave an empty summary")
        return run.reply

    async def _run_cli(
        self, args: list[str], cwd: Path, prompt: str, run: _Run, model: str
    ) -> AsyncGenerator[Step, None]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                limit=LINE_LIMIT,
                # Its own process group, so stopping it also stops the commands it started.
                start_new_session=True,
            )
        except OSError as exc:
            raise AgentFailed(
                f"cannot start the Claude Code CLI {self.binary} (AGENVOY_CLAUDE_CODE_BIN): {exc}"
            ) from exc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stderr = bytearray()
        helpers = [
            asyncio.create_task(_feed(proc.stdin, prompt)),
            asyncio.create_task(_collect(proc.stderr, stderr)),
        ]
        # A consumer cancelled between two steps leaves this generator suspended at a yield,
        # and its `finally` runs only when the generator is closed or collected. The CLI must
        # not outlive the task that started it in the meantime.
        owner = asyncio.current_task()

        def orphaned(_: object) -> None:
            if proc.returncode is None:
                _signal_group(proc, signal.SIGKILL)

        if owner is not None:
            owner.add_done_callback(orphaned)
        started = time.monotonic()
        code: int | None = None
        try:
            while True:
                try:
                    line = await proc.stdout.readline()
                except ValueError:
                    log.warning("skipped an overlong line from the Claude Code CLI")
                    continue
                if not line:
                    break
                event = _parse(line)
                if event is None:
                    continue
                for step in self._absorb(event, run, model, started):
                    yield step
                if event.get("type") == "result":
                    # The last event. Reading on to EOF could hang on a pipe that a command the
                    # CLI left running in the background still holds open.
                    break
            try:
                code = await asyncio.wait_for(proc.wait(), EXIT_GRACE_SECONDS)
            except TimeoutError:
                log.warning("the Claude Code CLI did not exit after its output; stopping it")
            # stderr is complete once the CLI exited, unless a leftover child holds it open.
            await asyncio.wait(helpers, timeout=1.0)
        finally:
            if owner is not None:
                owner.remove_done_callback(orphaned)
            await _stop(proc, self.kill_grace)
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        run.failure = _failure(run, code, _tail(stderr))

    def _absorb(self, event: dict[str, Any], run: _Run, model: str, started: float) -> list[Step]:
        """The steps one stream-json event stands for (and what it tells about the run)."""
        kind = event.get("type")
        if kind == "system":
            if event.get("subtype") == "init" and isinstance(event.get("session_id"), str):
                run.session_id = event["session_id"]
            return []
        if kind == "result":
            run.result = event
            if isinstance(event.get("session_id"), str):
                run.session_id = event["session_id"]
            text = event.get("result")
            run.reply = text if isinstance(text, str) and text else "".join(run.turn_text)
            run.reply = run.reply.strip()
            return [_usage(model, event, run.call_ids, started)]
        if kind not in ("assistant", "user"):
            return []
        message = event.get("message")
        blocks = message.get("content") if isinstance(message, dict) else None
        if not isinstance(blocks, list):
            return []
        # Text of a subagent (the CLI's Task tool) is its report to the CLI, not the answer.
        nested = bool(event.get("parent_tool_use_id"))
        steps: list[Step] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if kind == "assistant" and btype == "text" and not nested:
                text = str(block.get("text") or "")
                if text:
                    run.turn_text.append(text)
                    steps.append(Delta(text))
            elif kind == "assistant" and btype == "tool_use":
                call_id, tool = str(block.get("id") or ""), str(block.get("name") or "tool")
                raw = block.get("input")
                run.tool_names[call_id] = tool
                run.call_ids.append(call_id)
                if not nested:
                    run.turn_text.clear()
                steps.append(ToolCall(call_id, tool, raw if isinstance(raw, dict) else {}))
            elif kind == "user" and btype == "tool_result":
                call_id = str(block.get("tool_use_id") or "")
                status = "error" if block.get("is_error") else "ok"
                tool = run.tool_names.get(call_id, "tool")
                steps.append(ToolResult(call_id, tool, status, _tool_text(block.get("content"))))
        run.produced = run.produced or bool(steps)
        return steps


def _resumable(state: dict[str, Any] | None, seen: Sequence[str]) -> tuple[str, int] | None:
    """The CLI session to resume and how many window messages it has seen, if it can be."""
    if state is None:
        return None
    session_id, saved = state.get("session_id"), state.get("fingerprints")
    if not isinstance(session_id, str) or not session_id or not isinstance(saved, list):
        return None
    known = resume_point([str(f) for f in saved], seen)
    return None if known is None else (session_id, known)


def _line(message: StoredMessage) -> str:
    who = "assistant" if message.role == "assistant" else (message.sender or "user")
    return f"{who}: {message.content}"


def _new_message(ctx: AgentContext) -> str:
    sender = ctx.origin.sender_name or ctx.origin.sender_id or "user"
    lines = [f"{sender}: {ctx.text}"]
    # The CLI can open files itself, so it is told where the adapter saved the attachments.
    lines += [
        f"[attachment {a.name} ({a.mime}) saved as {a.path}]" for a in ctx.attachments if a.path
    ]
    return "\n".join(lines)


def _transcript(summary: str, window: Sequence[StoredMessage], new_message: str) -> str:
    parts = []
    if summary:
        parts.append(f"Summary of the earlier conversation:\n{summary}")
    if window:
        parts.append("Conversation so far:\n" + "\n".join(_line(m) for m in window))
    if not parts:
        return new_message
    parts.append(f"New message:\n{new_message}")
    return "\n\n".join(parts)


def _parse(line: bytes) -> dict[str, Any] | None:
    text = line.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        event = json.loads(text)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        log.warning("skipped an unparseable line from the Claude Code CLI", line=text[:200])
        return None
    return event


def _count(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _usage(model: str, result: dict[str, Any], call_ids: list[str], started: float) -> Usage:
    usage = result.get("usage")
    tokens: dict[str, Any] = usage if isinstance(usage, dict) else {}
    written = _count(tokens.get("cache_creation_input_tokens"))
    duration = result.get("duration_ms")
    elapsed = _count(duration) if duration is not None else int((time.monotonic() - started) * 1000)
    return Usage(
        model=model,
        # Cache writes are billed input the model read for the first time, so they count in.
        input=_count(tokens.get("input_tokens")) + written,
        output=_count(tokens.get("output_tokens")),
        cache_read=_count(tokens.get("cache_read_input_tokens")),
        cache_write=written,
        elapsed_ms=elapsed,
        tool_calls=tuple(call_ids),
    )


def _tool_text(content: object) -> str:
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text") or ""))
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type') or 'content'}]")
        text = "\n".join(parts)
    elif content is None:
        text = ""
    else:
        text = json.dumps(content, ensure_ascii=False)
    if len(text) > TOOL_RESULT_CHARS:
        text = f"{text[:TOOL_RESULT_CHARS]}… ({len(text) - TOOL_RESULT_CHARS} more characters)"
    return text


def _failure(run: _Run, code: int | None, stderr: str) -> str:
    """Why the run gave no answer, for the user; "" when it did."""
    result = run.result
    if result is not None and (result.get("is_error") or result.get("subtype") != "success"):
        detail = result.get("result") or result.get("errors") or result.get("subtype")
        if isinstance(detail, list):
            detail = "; ".join(str(d) for d in detail)
        message = f"Claude Code failed: {detail}"
    elif code is not None and code < 0:
        message = f"the Claude Code CLI was killed by signal {-code}"
    elif code:
        message = f"the Claude Code CLI exited with status {code}"
    elif result is None:
        message = "the Claude Code CLI ended without an answer"
    else:
        return ""  # answered (a CLI that had to be stopped after its answer still answered)
    return f"{message} ({stderr})" if stderr else message


def _tail(stderr: bytearray) -> str:
    text = " ".join(stderr.decode("utf-8", errors="replace").split())
    return text if len(text) <= STDERR_SHOWN_CHARS else f"…{text[-STDERR_SHOWN_CHARS:]}"


async def _feed(stdin: asyncio.StreamWriter, prompt: str) -> None:
    # A CLI that exits early (bad arguments, unknown session) may close its end first.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        try:
            stdin.write(prompt.encode())
            await stdin.drain()
        finally:
            stdin.close()
        await stdin.wait_closed()


async def _collect(stream: asyncio.StreamReader, into: bytearray) -> None:
    # Drained all along, so a chatty CLI never blocks on a full pipe; only the tail is kept.
    while chunk := await stream.read(65536):
        into += chunk
        del into[:-STDERR_KEPT_BYTES]


def _signal_group(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


async def _stop(proc: asyncio.subprocess.Process, grace: float) -> None:
    """End a CLI still running, and whatever it started: SIGTERM, then SIGKILL after `grace`."""
    if proc.returncode is not None:
        return
    _signal_group(proc, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), grace)
        return
    except TimeoutError:
        pass
    except BaseException:
        # Cancelled again while waiting: no more waiting, but nothing is left running (the
        # event loop's child watcher still reaps the process).
        _signal_group(proc, signal.SIGKILL)
        raise
    # The CLI is still alive, so its pid still names its group: killing the group cannot hit
    # an unrelated process that reused the id.
    _signal_group(proc, signal.SIGKILL)
    await proc.wait()
