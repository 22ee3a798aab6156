"""The built-in tools an agent can call, each with a JSON schema and a confirmation flag
(`gateway.agents.tool_calls` runs them, and is re-exported here).

File tools work inside the session's workspace folder only, through `workspace.Workspace`: a
name that would leave it (absolute, `..`) is refused, and no link in it is ever followed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from gateway.agents.base import AgentContext, SubagentRefused
from gateway.agents.tool_cache import Reads
from gateway.agents.tool_calls import CURRENT_CALL as CURRENT_CALL
from gateway.agents.tool_calls import Tool as Tool
from gateway.agents.tool_calls import ToolFailed as ToolFailed
from gateway.agents.tool_calls import ToolSource as ToolSource
from gateway.agents.tool_calls import call_tool as call_tool
from gateway.agents.tool_calls import result_text as result_text
from gateway.agents.tool_calls import with_found as with_found
from gateway.agents.workspace import Workspace, WorkspaceError, file_parts
from gateway.memory.recalled import as_json

MAX_READ_BYTES = 256 * 1024

T = TypeVar("T")


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


async def _remember(ctx: AgentContext, args: dict[str, Any]) -> str:
    text = args.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ToolFailed("text (a non-empty string) is required")
    try:
        return await ctx.remember(text)
    except ValueError as exc:
        raise ToolFailed(str(exc)) from None


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
            "remember",
            "Remember something about the user who asked (a fact or preference in their own "
            "words, at most 500 characters), for their later messages in any chat. The user "
            "is asked to agree first; use it only when they want it remembered.",
            _object(
                {"text": {"type": "string", "description": "what to remember, about them"}},
                ["text"],
            ),
            True,
            _remember,
            # The same words are kept once: a second run finds them remembered already.
            idempotent=True,
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
