"""The offline agent: deterministic, no network.

It makes the gateway useful out of the box and lets tests drive every path. Its behaviour is
a contract (README, "The offline agent"):

- plain text            → `echo: <text>`
- `!confirm <action>`   → confirmation for tool `demo_action`; `approved: <action>` / `denied: …`
- `!ask <question>`     → ask_user; `answer: <answer>` or `answer: (none)` on timeout
- `!write <name> <text>`→ `write_file` into the session workspace after confirmation;
                          `wrote <name> (<n> bytes)`
- `!sleep <seconds>`    → cancellable wait, one text_delta per second; `slept <seconds>s`,
                          and `; took in: <text> | …` for messages it was handed meanwhile
                          (the `steer` queue mode; it asks once a second)
- `!fail`               → ends the run with an error
- `!tool <name> <json>` → a test hook: the built-in tool `name` with the JSON object as its
                          arguments, run the way a model's call is (`tools.call_tool`: error
                          memory, confirmation, journal, tool cache); `<name>: <result>`
- `!delegate <task>`    → <task> run by a subagent (a new temp-* session); `delegated: <its
                          reply>`, or `refused: …` at the depth or per-task limit
- `!recall <query>`     → a test hook: the session's older messages (outside the window) most
                          like the query, as the agents' context shows them; `recalled: …`
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence

from gateway.agents.base import (
    AgentContext,
    AgentFailed,
    Delta,
    Reply,
    Step,
    SubagentRefused,
    ToolCall,
    Usage,
)
from gateway.agents.tools import BUILTIN_TOOLS, call_tool, result_text
from gateway.agents.workspace import Workspace
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.memory.recalled import recalled_line
from gateway.store.sessions import StoredMessage

MAX_SLEEP_SECONDS = 3600
SUMMARY_MAX_CHARS = 8000


def _words(text: str) -> int:
    return len(text.split())


class OfflineAgent:
    name = "offline"
    reads_recall = False
    tool_names = frozenset({"demo_action", *BUILTIN_TOOLS})
    tool_prefixes: tuple[str, ...] = ()

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock

    async def aclose(self) -> None:
        """Holds nothing."""

    async def summarize(self, previous: str, messages: Sequence[StoredMessage]) -> str:
        """A deterministic digest: one short line per message, newest kept within a bound."""
        lines = [previous] if previous else []
        for message in messages:
            who = message.sender or message.role
            lines.append(f"{who}: {message.content[:80]}")
        return "\n".join(lines)[-SUMMARY_MAX_CHARS:]

    async def run(self, ctx: AgentContext) -> AsyncIterator[Step]:
        started = self.clock.monotonic()
        async for step in self._reply(ctx):
            if isinstance(step, Reply):
                elapsed = int((self.clock.monotonic() - started) * 1000)
                yield Usage(
                    model="offline",
                    input=_words(ctx.text),
                    output=_words(step.text),
                    elapsed_ms=elapsed,
                )
            yield step

    def _reply(self, ctx: AgentContext) -> AsyncIterator[Step]:
        command, _, rest = ctx.text.strip().partition(" ")
        rest = rest.strip()
        if command == "!confirm":
            return self._confirm(ctx, rest)
        if command == "!ask":
            return self._ask(ctx, rest)
        if command == "!write":
            return self._write(ctx, rest)
        if command == "!sleep":
            return self._sleep(ctx, rest)
        if command == "!fail":
            return self._fail()
        if command == "!tool":
            return self._tool(ctx, rest)
        if command == "!delegate":
            return self._delegate(ctx, rest)
        if command == "!recall":
            return self._recall(ctx, rest)
        return self._echo(ctx.text)

    async def _delegate(self, ctx: AgentContext, task: str) -> AsyncIterator[Step]:
        try:
            answer = await ctx.delegate(task or "?")
        except SubagentRefused as exc:
            yield Reply(f"refused: {exc}")
            return
        yield Reply(f"delegated: {answer}")

    async def _echo(self, text: str) -> AsyncIterator[Step]:
        yield Reply(f"echo: {text}")

    async def _confirm(self, ctx: AgentContext, action: str) -> AsyncIterator[Step]:
        args = {"action": action}
        if not await ctx.confirm("demo_action", args):
            yield Reply(f"denied: {action}")
            return

        async def perform() -> str:
            return f"performed {action}"

        call = ToolCall(f"{ctx.task_hash}-1", "demo_action", args, idempotent=True)
        await ctx.run_tool(call, perform)
        yield Reply(f"approved: {action}")

    async def _ask(self, ctx: AgentContext, question: str) -> AsyncIterator[Step]:
        answer = await ctx.ask_user(question or "?")
        yield Reply(f"answer: {answer if answer is not None else '(none)'}")

    async def _write(self, ctx: AgentContext, rest: str) -> AsyncIterator[Step]:
        name, _, text = rest.partition(" ")
        problem = _unsafe_name(name)
        if problem:
            yield Reply(f"refused: {problem}")
            return
        data = text.encode()
        args = {"name": name, "bytes": len(data)}
        if not await ctx.confirm("write_file", args):
            yield Reply(f"denied: write {name}")
            return

        async def write() -> str:
            # A refusal (a link planted in the workspace) says the name, not the server path.
            await asyncio.to_thread(Workspace(ctx.workspace).write, name, data)
            await ctx.record_file_version(str(ctx.workspace), name, text)
            return f"{len(data)} bytes"

        # Writing the same text again leaves the same file and the same recorded version.
        call = ToolCall(f"{ctx.task_hash}-1", "write_file", args, idempotent=True)
        result = await ctx.run_tool(call, write)
        if result.status != "ok":
            yield Reply(f"write {name} failed: {result.status} {result.result}".rstrip())
            return
        yield Reply(f"wrote {name} ({len(data)} bytes)")

    async def _tool(self, ctx: AgentContext, rest: str) -> AsyncIterator[Step]:
        name, _, raw = rest.partition(" ")
        try:
            args = json.loads(raw or "{}")
        except ValueError:
            args = None
        if not name or not isinstance(args, dict):
            yield Reply("refused: !tool <name> <JSON object of arguments>")
            return
        result = await call_tool(ctx, BUILTIN_TOOLS, f"{ctx.task_hash}-1", name, args)
        yield Reply(f"{name}: {result_text(result)}")

    async def _recall(self, ctx: AgentContext, query: str) -> AsyncIterator[Step]:
        found = await ctx.recall(query) if query else []
        lines = [recalled_line(r) for r in found]
        yield Reply("recalled: " + (" | ".join(lines) if lines else "(nothing)"))

    async def _sleep(self, ctx: AgentContext, rest: str) -> AsyncIterator[Step]:
        try:
            seconds = int(rest)
        except ValueError:
            raise AgentFailed(f"!sleep needs a whole number of seconds, not {rest!r}") from None
        if not 0 <= seconds <= MAX_SLEEP_SECONDS:
            raise AgentFailed(f"!sleep takes 0 to {MAX_SLEEP_SECONDS} seconds")
        taken: list[str] = []
        for second in range(1, seconds + 1):
            await self.clock.sleep(1)  # the wait itself is what this command is for
            yield Delta(f"{second}s ")
            taken += [message.text for message in await ctx.steering()]
        yield Reply(f"slept {seconds}s" + (f"; took in: {' | '.join(taken)}" if taken else ""))

    async def _fail(self) -> AsyncIterator[Step]:
        raise AgentFailed("the offline agent was asked to fail (!fail)")
        yield  # pragma: no cover  (makes this an async generator)


def _unsafe_name(name: str) -> str:
    if not name:
        return "a file name is required: !write <name> <text>"
    if "/" in name or "\\" in name or name in (".", "..") or "\x00" in name:
        return f"file name {name!r} must be a plain name inside the workspace"
    return ""
