"""The `claude-code` agent: the Claude Code CLI, one process per task, in streaming JSON mode.

The CLI runs in the session workspace with its own tools (files, shell, search); they run inside
the CLI, so the gateway reports them as tool calls and results instead of running them through
the router. Its system prompt gets the openai agent's one appended (base instructions, persona,
formatting note for the platform).

A task resumes the CLI session that saw the conversation so far and sends it only what is new
(`claude_resume` has the rule); without one it starts fresh and is sent the summary, the whole
window and the new message. The process itself is `claude_process`, what it prints
`claude_stream`.

A tool call the CLI wants permission for is asked in the chat that started the task
(`claude_permissions`); the CLI sees only the environment it needs (`cli_environment`).

Rolling summaries are one more CLI call each, with the summary model, no tools at all, one
turn, no transcript kept and an empty scratch directory; a fresh start sends the summary ahead
of the window.

A changed persona or model gives another resume file, hence a fresh start. A resume the CLI
refuses (its session was deleted, or lives on another machine) is retried once fresh, provided
nothing of it reached the user yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from gateway.agents.base import AgentContext, AgentFailed, PastMessage, Reply, Step
from gateway.agents.claude_permission_server import PROMPT_TOOL
from gateway.agents.claude_permissions import PermissionBridge, PermissionRequest, cli_mcp_config
from gateway.agents.claude_process import (
    DRAIN_SECONDS,
    EXIT_GRACE_SECONDS,
    CliProcess,
    cli_environment,
)
from gateway.agents.claude_resume import ResumeState, fingerprint
from gateway.agents.claude_stream import CliRun, parse_line
from gateway.agents.openai import SUMMARY_INSTRUCTIONS, system_prompt
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.logs import get_logger
from gateway.mcp_tools.config import McpConfig, write_claude_code_config
from gateway.settings import Settings
from gateway.store.sessions import StoredMessage

log = get_logger(__name__)

FIRST = asyncio.FIRST_COMPLETED


class ClaudeCodeUnavailable(ValueError):
    """The CLI cannot be found; a start-up error."""


class ClaudeCodeAgent:
    name = "claude-code"
    # The CLI keeps its own memory of the conversation; recalled messages are not handed it.
    reads_recall = False
    # The CLI's own tools, as its permission settings name them: what `/allow` may let run
    # without asking (anything else is refused rather than passed to --allowedTools).
    tool_names = frozenset(
        {
            "Bash",
            "Edit",
            "Glob",
            "Grep",
            "LS",
            "MultiEdit",
            "NotebookEdit",
            "NotebookRead",
            "Read",
            "Task",
            "TodoWrite",
            "WebFetch",
            "WebSearch",
            "Write",
        }
    )

    def __init__(
        self, settings: Settings, *, clock: Clock = SYSTEM_CLOCK, mcp: McpConfig | None = None
    ) -> None:
        found = shutil.which(settings.claude_code_bin)
        if found is None:
            raise ClaudeCodeUnavailable(
                f"the Claude Code CLI {settings.claude_code_bin!r} is not installed or not "
                "executable; install it or set AGENVOY_CLAUDE_CODE_BIN to its path"
            )
        self.settings = settings
        # Absolute: the CLI runs with the session workspace as its working directory.
        self.binary = os.path.abspath(found)
        # Times the grace periods of the CLI process and a run's elapsed time.
        self.clock = clock
        key = settings.anthropic_api_key
        self._api_key = key.get_secret_value() if key else None
        self._env_names = [n.strip() for n in settings.claude_code_env.split(",") if n.strip()]
        # The MCP servers go to the CLI as its own `--mcp-config`; it names their tools
        # `mcp__<server>__<tool>`, which is what `/allow` takes.
        self.mcp = mcp or McpConfig()
        self.tool_prefixes = self.mcp.prefixes("mcp__")
        self._mcp_file: Path | None = None

    async def aclose(self) -> None:
        """Holds nothing between runs: each run's CLI process ends with its run."""

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
        if self.mcp and self._mcp_file is None:
            store = self.settings.store_dir
            self._mcp_file = await asyncio.to_thread(write_claude_code_config, self.mcp, store)

        # The CLI runs its own tool loop: the budgets are asked once, before it starts.
        await ctx.before_model_call()
        run: CliRun | None = None
        saved = await ctx.read_resume_state(model, system, with_tools=True)
        resume = ResumeState.from_json(saved)
        known = resume.seen_of(seen) if resume is not None else None
        if resume is not None and known is not None:
            prompt = "\n".join([*(_line(m) for m in window[known:]), new_message])
            run = CliRun(model)
            async for step in self._attempt(ctx, system, prompt, resume.session_id, run):
                yield step
            if run.failure and not run.produced:
                log.warning(
                    "the Claude Code CLI did not resume its session; starting fresh",
                    session=ctx.session_id,
                    cli_session=resume.session_id,
                    reason=run.failure,
                )
                run = None
        if run is None:
            run = CliRun(model)
            prompt = _transcript(ctx.summary, window, new_message)
            async for step in self._attempt(ctx, system, prompt, None, run):
                yield step
        if run.denials:
            # Each was a failed tool result in the stream already; the log says why.
            log.info(
                "the Claude Code CLI did not run tool calls it was refused",
                session=ctx.session_id,
                tools=[str(d.get("tool_name")) for d in run.denials],
            )
        if run.failure:
            raise AgentFailed(run.failure)
        if run.reply:  # the router stores no empty reply, so it has no fingerprint either
            conversation.append(fingerprint("assistant", self.name, run.reply))
        state = ResumeState(run.session_id, conversation, run.reply)
        await ctx.write_resume_state(model, system, state.to_json(), with_tools=True)
        yield Reply(run.reply)

    async def _attempt(
        self, ctx: AgentContext, system: str, prompt: str, resume: str | None, run: CliRun
    ) -> AsyncGenerator[Step, None]:
        """One CLI process for the task, fresh or resuming; what it produced lands in `run`."""
        args = self._task_args(ctx, run.model, system, resume)
        async with await PermissionBridge.open() as bridge:
            # A confirmation is answered or expired within its timeout; a minute more for the
            # gateway's own way there and back.
            within = self.settings.confirm_timeout_seconds + 60
            config = await bridge.write_config(cli_mcp_config(bridge.mcp_server(within)))
            # The configured MCP servers (AGENVOY_MCP_CONFIG) and this run's permission server,
            # and no other: none from the workspace or the CLI's user settings.
            configs = [str(self._mcp_file)] if self._mcp_file is not None else []
            args += ["--mcp-config", *configs, str(config), "--strict-mcp-config"]
            args += ["--permission-prompt-tool", PROMPT_TOOL]
            run_cli = self._run_cli(args, ctx.workspace, prompt, run, bridge, ctx)
            async with contextlib.aclosing(run_cli) as steps:
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
        # The session's level, else the gateway's default (AGENVOY_REASONING).
        effort = ctx.reasoning or self.settings.reasoning
        if effort:
            args += ["--effort", effort]
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
        # No tools (built-in or MCP) and one turn: the answer is the summary. No transcript
        # either: nobody resumes a summary, so a folder per summary would only pile up.
        args = [
            *self._base_args(model, SUMMARY_INSTRUCTIONS),
            "--tools",
            "",
            "--strict-mcp-config",
            "--max-turns",
            "1",
            "--no-session-persistence",
        ]
        # An empty directory of its own: a summary has no business with any workspace.
        cwd = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="agenvoy-summary-"))
        run = CliRun(model)
        try:
            async with contextlib.aclosing(self._run_cli(args, cwd, prompt, run)) as steps:
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
        self,
        args: list[str],
        cwd: Path,
        prompt: str,
        run: CliRun,
        bridge: PermissionBridge | None = None,
        ctx: AgentContext | None = None,
    ) -> AsyncGenerator[Step, None]:
        try:
            env = cli_environment(os.environ, api_key=self._api_key, extra=self._env_names)
            process = await CliProcess.start(args, cwd, prompt, self.clock, env)
        except OSError as exc:
            raise AgentFailed(
                f"cannot start the Claude Code CLI {self.binary} (AGENVOY_CLAUDE_CODE_BIN): {exc}"
            ) from exc
        started = self.clock.monotonic()
        async with process, _Waiting(process, bridge) as waiting:
            while (got := await waiting.next()) is not None:
                if isinstance(got, PermissionRequest):
                    assert ctx is not None
                    # Asked in the task's own flow, like any tool's confirmation.
                    got.answer.set_result(await ctx.confirm(got.tool, got.args))
                    continue
                event = parse_line(got)
                if event is None:
                    continue
                elapsed_ms = int((self.clock.monotonic() - started) * 1000)
                for step in run.absorb(event, elapsed_ms=elapsed_ms):
                    yield step
                if event.get("type") == "result":
                    # Often the last event, not always: a background subagent's report brings
                    # another turn and result. So reading goes on until the CLI exits, not to
                    # EOF, which a command it left running in the background may hold off.
                    waiting.answered = True
            code = await process.exited()
        run.ended(code, process.stderr_tail())
        elapsed_ms = int((self.clock.monotonic() - started) * 1000)
        for usage in run.usage(elapsed_ms):
            yield usage


class _Waiting:
    """The CLI's next stdout line or its next permission request, whichever comes first.

    Once the CLI answered (`answered`), its output ends when it exits (what it wrote before
    is still read) or after `EXIT_GRACE_SECONDS` of silence (it is stopped on the way out)."""

    def __init__(self, process: CliProcess, bridge: PermissionBridge | None) -> None:
        self._process = process
        self._bridge = bridge
        self._line: asyncio.Task[bytes | None] | None = None
        self._request: asyncio.Task[PermissionRequest] | None = None
        self._exit: asyncio.Task[int] | None = None
        self.answered = False

    async def __aenter__(self) -> _Waiting:
        return self

    async def __aexit__(self, *_: object) -> None:
        pending = [t for t in (self._line, self._request, self._exit) if t is not None]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def next(self) -> bytes | PermissionRequest | None:
        """A line (None once stdout ended) or a request; a request goes first."""
        if self._line is None:
            self._line = asyncio.ensure_future(self._process.next_line())
        if self._bridge is not None and self._request is None:
            self._request = asyncio.ensure_future(self._bridge.requests.get())
        waited: set[asyncio.Future[Any]] = {self._line}
        if self._request is not None:
            waited.add(self._request)
        if self.answered:
            if self._exit is None:
                self._exit = asyncio.ensure_future(self._process.wait())
            waited.add(self._exit)
            done, _ = await asyncio.wait(waited, timeout=EXIT_GRACE_SECONDS, return_when=FIRST)
            if not done:
                return None  # silent since its answer
        else:
            await asyncio.wait(waited, return_when=FIRST)
        if self._request is not None and self._request.done():
            request, self._request = self._request.result(), None
            return request
        if not self._line.done():
            # Exited: what it wrote before is in the pipe already.
            await asyncio.wait({self._line}, timeout=DRAIN_SECONDS)
            if not self._line.done():
                return None
        line, self._line = self._line.result(), None
        return line


def _line(message: PastMessage) -> str:
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


def _transcript(summary: str, window: Sequence[PastMessage], new_message: str) -> str:
    parts = []
    if summary:
        parts.append(f"Summary of the earlier conversation:\n{summary}")
    if window:
        parts.append("Conversation so far:\n" + "\n".join(_line(m) for m in window))
    if not parts:
        return new_message
    parts.append(f"New message:\n{new_message}")
    return "\n\n".join(parts)
