"""The built-in tools an agent can call, each with a JSON schema and a confirmation flag.

File tools work inside the session's workspace folder only, through `workspace.Workspace`: a
name that would leave it (absolute, `..`) is refused, and no link in it is ever followed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from gateway.agents.base import AgentContext, ToolCall, ToolResult
from gateway.agents.workspace import Workspace, WorkspaceError, file_parts

MAX_READ_BYTES = 256 * 1024

T = TypeVar("T")


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

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


async def call_tool(
    ctx: AgentContext, tools: Mapping[str, Tool], call_id: str, name: str, args: dict[str, Any]
) -> ToolResult:
    """Run one call a model asked for: confirmed where the tool says so, then through the
    router (journaled, run once). Every agent with tools goes through here, so confirmations
    and journaling cannot differ between providers."""
    tool = tools.get(name)
    if tool is None:
        return ToolResult(call_id, name, "error", f"there is no tool named {name!r}")
    if tool.needs_confirmation and not await ctx.confirm(name, args):
        return ToolResult(call_id, name, "denied", "the user denied this action")

    async def execute() -> str:
        try:
            return await tool.run(ctx, args)
        except ToolFailed as exc:
            raise RuntimeError(str(exc)) from exc

    return await ctx.run_tool(ToolCall(call_id, name, args, idempotent=tool.idempotent), execute)


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


async def _ask_user(ctx: AgentContext, args: dict[str, Any]) -> str:
    question = args.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ToolFailed("question (a non-empty string) is required")
    options = args.get("options") or []
    answer = await ctx.ask_user(question, [str(o) for o in options][:25])
    return answer if answer is not None else "(no answer)"


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
        ),
        Tool(
            "read_file",
            "Read a text file from the session workspace.",
            _object(_NAME, ["name"]),
            False,
            _read_file,
        ),
        Tool(
            "write_file",
            "Create or replace a text file in the session workspace.",
            _object({**_NAME, "content": {"type": "string"}}, ["name", "content"]),
            True,
            _write_file,
        ),
        Tool(
            "delete_file",
            "Delete a file from the session workspace.",
            _object(_NAME, ["name"]),
            True,
            _delete_file,
            # A second run finds the file gone and says so: the agent is told it was cut off.
            idempotent=False,
        ),
        Tool(
            "search_history",
            "Full-text search of this conversation's earlier messages.",
            _object({"query": {"type": "string"}}, ["query"]),
            False,
            _search_history,
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
    ]
}
