"""The built-in tools an agent can call, each with a JSON schema and a confirmation flag.

File tools work inside the session's workspace folder only: a name that would leave it
(absolute, `..`, a link pointing out) is refused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.agents.base import AgentContext

MAX_READ_BYTES = 256 * 1024


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


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def workspace_path(ctx: AgentContext, name: object) -> Path:
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ToolFailed("a file name (a non-empty string) is required")
    relative = Path(name)
    if relative.is_absolute() or ".." in relative.parts:
        raise ToolFailed(f"{name!r} is outside the workspace; use a relative name")
    root = ctx.workspace.resolve()
    target = (root / relative).resolve()
    if not target.is_relative_to(root):
        raise ToolFailed(f"{name!r} leads outside the workspace")
    return target


async def _current_time(ctx: AgentContext, args: dict[str, Any]) -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def _list_files(ctx: AgentContext, args: dict[str, Any]) -> str:
    def listing() -> list[str]:
        root = ctx.workspace
        if not root.is_dir():
            return []
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    return json.dumps(await asyncio.to_thread(listing))


async def _read_file(ctx: AgentContext, args: dict[str, Any]) -> str:
    target = workspace_path(ctx, args.get("name"))

    def read() -> str:
        if not target.is_file():
            raise ToolFailed(f"no file {args.get('name')!r} in the workspace")
        data = target.read_bytes()[:MAX_READ_BYTES]
        return data.decode("utf-8", errors="replace")

    return await asyncio.to_thread(read)


async def _write_file(ctx: AgentContext, args: dict[str, Any]) -> str:
    target = workspace_path(ctx, args.get("name"))
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolFailed("content (a string) is required")
    previous = await asyncio.to_thread(_read_if_exists, target)
    # The version the task saw first is kept; later writes in the same task are no-ops there.
    await ctx.record_file_version(str(ctx.workspace), str(args["name"]), previous or "")
    await asyncio.to_thread(_write, target, content.encode())
    return f"wrote {len(content.encode())} bytes to {args['name']}"


async def _delete_file(ctx: AgentContext, args: dict[str, Any]) -> str:
    target = workspace_path(ctx, args.get("name"))
    previous = await asyncio.to_thread(_read_if_exists, target)
    if previous is None:
        raise ToolFailed(f"no file {args.get('name')!r} in the workspace")
    await ctx.record_file_version(str(ctx.workspace), str(args["name"]), previous)
    await asyncio.to_thread(target.unlink)
    return f"deleted {args['name']}"


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


def _read_if_exists(target: Path) -> str | None:
    try:
        return target.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


def _write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(target)


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
