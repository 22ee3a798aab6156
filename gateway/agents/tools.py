"""The built-in tools an agent can call, each with a JSON schema and a confirmation flag, and
`call_tool`, the one way an agent runs them.

File tools work inside the session's workspace folder only, through `workspace.Workspace`: a
name that would leave it (absolute, `..`) is refused, and no link in it is ever followed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from gateway.agents.base import AgentContext, SubagentRefused, ToolCall, ToolResult
from gateway.agents.error_memory import RepeatedFailure
from gateway.agents.tool_args import InvalidArguments, check_args
from gateway.agents.tool_cache import Reads, canonical_args
from gateway.agents.tool_memory import ToolMemory
from gateway.agents.workspace import Workspace, WorkspaceError, file_parts
from gateway.memory.recalled import as_json

MAX_READ_BYTES = 256 * 1024

T = TypeVar("T")
# The id of the tool call being run, for a tool that names what it starts after it (delegate).
CURRENT_CALL: ContextVar[str] = ContextVar("agenvoy_current_tool_call", default="")


class ToolFailed(Exception):
    """A tool could not do what was asked; the message goes back to the model."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    needs_confirmation: bool
    run: Callable[[AgentContext, dict[str, Any]], Awaitable[str]]
    # The same call run twice has the effect of running it once (see ToolCall.idempotent).
    idempotent: bool = True
    # What the result depends on: its version keys the tool cache and dates a failure.
    reads: Reads = Reads.nothing
    # Only reads, so its result may come from the tool cache.
    cached: bool = False
    # Writes or deletes workspace files: cached reads of the workspace are stale after it.
    changes_workspace: bool = False

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolSource(Protocol):
    """Tools found while the gateway runs, next to the built-in ones (the MCP servers')."""

    # What their names start with: `/allow` takes such a name before the tools are known.
    prefixes: tuple[str, ...]

    async def tools(self) -> Mapping[str, Tool]: ...

    async def aclose(self) -> None: ...


async def with_found(builtin: Mapping[str, Tool], source: ToolSource | None) -> dict[str, Tool]:
    """The built-in tools and, after them, those of `source`; a built-in name wins."""
    if source is None:
        return dict(builtin)
    found = await source.tools()
    return {**builtin, **{name: tool for name, tool in found.items() if name not in builtin}}


async def call_tool(
    ctx: AgentContext, tools: Mapping[str, Tool], call_id: str, name: str, args: dict[str, Any]
) -> ToolResult:
    """Run one call a model asked for: checked against the tool's schema, told of an earlier
    failure of the same call, confirmed where the tool says so, then through the router
    (journaled, run once), from the tool cache when it holds the result. Every agent with
    tools goes through here, so none of it can differ between providers."""
    tool = tools.get(name)
    if tool is None:
        return ToolResult(call_id, name, "error", f"there is no tool named {name!r}")
    call = ToolCall(call_id, name, args, idempotent=tool.idempotent)
    try:
        check_args(name, tool.parameters, args)
    except InvalidArguments as exc:
        # Through the router like any result, so the audit trail shows the call it refused.
        invalid = str(exc)

        async def refuse_invalid() -> str:
            raise InvalidArguments(invalid)

        return await ctx.run_tool(call, refuse_invalid)
    memory = ctx.tool_memory
    key = canonical_args(args, tool.reads)
    failed_before = False
    if memory is not None and memory.errors.enabled:
        failure = await memory.errors.recall(ctx.session_id, name, key)
        failed_before = failure is not None
        if failure is not None:
            version = await _version(ctx, memory, tool, args)
            this_call = f"{ctx.task_hash}/{call_id}"
            if memory.errors.refuses(failure, version, this_call):
                await memory.errors.refused(ctx.session_id, name, key, failure, this_call)
                told = memory.errors.refusal(failure)

                async def refuse() -> str:
                    raise RepeatedFailure(told)

                return await ctx.run_tool(call, refuse)
    if tool.needs_confirmation and not await ctx.confirm(name, args):
        return ToolResult(call_id, name, "denied", "the user denied this action")

    async def execute() -> str:
        CURRENT_CALL.set(call_id)  # this task's own context: no other call sees it
        if memory is None:
            return await _run(ctx, tool, args)
        return await _run_remembered(ctx, memory, tool, args, key, failed_before=failed_before)

    return await ctx.run_tool(call, execute)


async def _run(ctx: AgentContext, tool: Tool, args: dict[str, Any]) -> str:
    try:
        return await tool.run(ctx, args)
    except ToolFailed as exc:
        raise RuntimeError(str(exc)) from exc


async def _run_remembered(
    ctx: AgentContext,
    memory: ToolMemory,
    tool: Tool,
    args: dict[str, Any],
    key: str,
    *,
    failed_before: bool,
) -> str:
    """`_run`, served from the tool cache or filling it; a failure remembered, a success
    forgetting an earlier one."""
    sid, cache, errors = ctx.session_id, memory.cache, memory.errors
    version = None
    if tool.cached and cache.enabled:
        version = await _version(ctx, memory, tool, args)
        if version is not None:
            hit = await cache.get(sid, tool.name, key, version)
            if hit is not None:
                return hit
    try:
        result = await _run(ctx, tool, args)
    except Exception as exc:
        if tool.changes_workspace:
            await cache.workspace_changed(sid)  # it may have got halfway
        if errors.enabled:
            # Dated after the failure: a repeat finds the same version unless something moved.
            after = await _version(ctx, memory, tool, args)
            await errors.remember(sid, tool.name, key, f"{type(exc).__name__}: {exc}", after)
        raise
    if tool.changes_workspace:
        await cache.workspace_changed(sid)
    if failed_before:
        await errors.forget(sid, tool.name, key)
    if version is not None:
        await cache.put(sid, tool.name, key, version, result)
    return result


async def _version(
    ctx: AgentContext, memory: ToolMemory, tool: Tool, args: dict[str, Any]
) -> str | None:
    return await memory.cache.version(
        ctx.session_id, tool.reads, ctx.workspace, args, ctx.latest_message_id
    )


def result_text(result: ToolResult) -> str:
    """What the model reads of a tool's result."""
    return result.result if result.status == "ok" else f"error ({result.status}): {result.result}"


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


async def _in_workspace(ctx: AgentContext, work: Callable[[Workspace], T]) -> T:
    try:
        return await asyncio.to_thread(work, Workspace(ctx.workspace))
    except WorkspaceError as exc:
        raise ToolFailed(str(exc)) from None


def _name(args: dict[str, Any]) -> str:
    name = args.get("name")
    try:
        file_parts(name)
    except WorkspaceError as exc:
        raise ToolFailed(str(exc)) from None
    return str(name)


async def _current_time(ctx: AgentContext, args: dict[str, Any]) -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def _list_files(ctx: AgentContext, args: dict[str, Any]) -> str:
    return json.dumps(await _in_workspace(ctx, Workspace.list))


async def _read_file(ctx: AgentContext, args: dict[str, Any]) -> str:
    name = _name(args)
    data = await _in_workspace(ctx, lambda ws: ws.read(name, MAX_READ_BYTES))
    if data is None:
        raise ToolFailed(f"no file {name!r} in the workspace")
    return _text(data)


async def _write_file(ctx: AgentContext, args: dict[str, Any]) -> str:
    name = _name(args)
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolFailed("content (a string) is required")
    previous = await _in_workspace(ctx, lambda ws: ws.read(name))
    # The version the task saw first is kept; later writes in the same task are no-ops there.
    await ctx.record_file_version(str(ctx.workspace), name, _text(previous or b""))
    data = content.encode()
    await _in_workspace(ctx, lambda ws: ws.write(name, data))
    return f"wrote {len(data)} bytes to {name}"


async def _delete_file(ctx: AgentContext, args: dict[str, Any]) -> str:
    name = _name(args)
    previous = await _in_workspace(ctx, lambda ws: ws.read(name))
    if previous is None:
        raise ToolFailed(f"no file {name!r} in the workspace")
    await ctx.record_file_version(str(ctx.workspace), name, _text(previous))
    await _in_workspace(ctx, lambda ws: ws.delete(name))
    return f"deleted {name}"


async def _search_history(ctx: AgentContext, args: dict[str, Any]) -> str:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolFailed("query (a non-empty string) is required")
    hits = await ctx.search_history(query)
    return json.dumps(hits, ensure_ascii=False)


async def _recall(ctx: AgentContext, args: dict[str, Any]) -> str:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolFailed("query (a non-empty string) is required")
    limit = args.get("limit", 5)
    limit = limit if isinstance(limit, int) and 1 <= limit <= 20 else 5
    return json.dumps([as_json(r) for r in await ctx.recall(query, limit)], ensure_ascii=False)


async def _ask_user(ctx: AgentContext, args: dict[str, Any]) -> str:
    question = args.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ToolFailed("question (a non-empty string) is required")
    options = args.get("options") or []
    answer = await ctx.ask_user(question, [str(o) for o in options][:25])
    return answer if answer is not None else "(no answer)"


async def _delegate(ctx: AgentContext, args: dict[str, Any]) -> str:
    task = args.get("task")
    if not isinstance(task, str) or not task.strip():
        raise ToolFailed("task (a non-empty string) is required")
    try:
        return await ctx.delegate(task, CURRENT_CALL.get())
    except SubagentRefused as exc:
        raise ToolFailed(str(exc)) from None


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


_NAME = {"name": {"type": "string", "description": "file name relative to the workspace"}}

BUILTIN_TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in [
        Tool(
            "current_time",
            "The current date and time (UTC).",
            _object({}, []),
            False,
            _current_time,
        ),
        Tool(
            "list_files",
            "List the files in the session workspace.",
            _object({}, []),
            False,
            _list_files,
            reads=Reads.workspace,
            cached=True,
        ),
        Tool(
            "read_file",
            "Read a text file from the session workspace.",
            _object(_NAME, ["name"]),
            False,
            _read_file,
            reads=Reads.file,
            cached=True,
        ),
        Tool(
            "write_file",
            "Create or replace a text file in the session workspace.",
            _object({**_NAME, "content": {"type": "string"}}, ["name", "content"]),
            True,
            _write_file,
            reads=Reads.file,
            changes_workspace=True,
        ),
        Tool(
            "delete_file",
            "Delete a file from the session workspace.",
            _object(_NAME, ["name"]),
            True,
            _delete_file,
            # A second run finds the file gone and says so: the agent is told it was cut off.
            idempotent=False,
            reads=Reads.file,
            changes_workspace=True,
        ),
        Tool(
            "search_history",
            "Full-text search of this conversation's earlier messages.",
            _object({"query": {"type": "string"}}, ["query"]),
            False,
            _search_history,
            reads=Reads.history,
            cached=True,
        ),
        Tool(
            "recall",
            "Semantic search of this conversation's older messages (those no longer in view): "
            "the ones closest in meaning to the query, with sender, date and similarity.",
            _object({"query": {"type": "string"}, "limit": {"type": "integer"}}, ["query"]),
            False,
            _recall,
            # Not cached: embeddings arrive in the background, so the same query finds more
            # later without any new message.
        ),
        Tool(
            "ask_user",
            "Ask the user who started this task a question and wait for the answer.",
            _object(
                {
                    "question": {"type": "string"},
                    "options": {"type": "array", "items": {"type": "string"}},
                },
                ["question"],
            ),
            False,
            _ask_user,
        ),
        Tool(
            "delegate",
            "Hand a self-contained sub-task to a subagent and wait for its answer. The subagent "
            "starts a conversation of its own with only the task you give it (say everything "
            "it needs), has your tools and workspace, and answers with its result.",
            _object(
                {"task": {"type": "string", "description": "what the subagent must do"}}, ["task"]
            ),
            False,
            _delegate,
            # Run again after a crash, the same call finds the same subagent and its progress.
            idempotent=True,
        ),
    ]
}
