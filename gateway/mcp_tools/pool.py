"""The configured MCP servers' tools as the agents' `Tool`s, next to the built-in ones.

A tool `search` of the server `docs` is `docs__search` to the model (characters providers do
not take become `_`; a name past 64 characters is cut and given a hash). Every call goes through
`tools.call_tool` like a built-in one: told of an earlier failure, confirmed unless the
session allowed the tool (`/allow docs__search`), journaled by the router. A tool whose
annotations say it only reads or is idempotent may run again after a crash cut it off; any
other is reported as interrupted. Results are never cached: the gateway cannot know what a
server's result depends on.

Servers start on the first task that needs the tool list; one that cannot start is logged
and its tools are left out of that task (the next task tries again).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

import mcp_types as types

from gateway.agents.base import AgentContext
from gateway.agents.tools import Tool, ToolFailed
from gateway.logs import get_logger
from gateway.mcp_tools.config import SEPARATOR, McpConfig
from gateway.mcp_tools.server import McpServer, ServerUnavailable

log = get_logger(__name__)

MAX_NAME: Final = 64  # OpenAI's limit for a function name, within Anthropic's
MAX_RESULT_CHARS: Final = 256 * 1024
NOT_NAME: Final = re.compile(r"[^A-Za-z0-9_-]")
EMPTY_OBJECT: Final = {"type": "object", "properties": {}}


def tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>`, in the characters and length the providers accept."""
    name = f"{server}{SEPARATOR}{NOT_NAME.sub('_', tool)}"
    if len(name) <= MAX_NAME and name == f"{server}{SEPARATOR}{tool}":
        return name
    # Changed or cut: a hash of the real name keeps two such names apart.
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def result_text(result: types.CallToolResult) -> str:
    """What the model reads of a result: the text parts, a line for each other part (an
    image is described, not sent), the structured result when there is nothing else."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            size = len(block.data) * 3 // 4
            parts.append(f"[{kind}, {block.mime_type}, about {size} bytes, not shown]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link: {block.uri} {block.name}]")
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource {resource.uri}, {resource.mime_type or 'binary'}]")
        else:
            parts.append(f"[{getattr(block, 'type', 'unknown')} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[cut at {MAX_RESULT_CHARS} characters]"
    return text


class McpTools:
    """The tools of every configured server, for the openai and claude agents."""

    def __init__(self, config: McpConfig, *, call_timeout: float, start_timeout: float) -> None:
        self.config = config
        self.servers = {
            s.name: McpServer(s, call_timeout=call_timeout, start_timeout=start_timeout)
            for s in config.servers
        }
        # What `/allow` takes before any server ran: `<server>__…`.
        self.prefixes = config.prefixes()

    async def tools(self) -> Mapping[str, Tool]:
        """Every running (or startable) server's tools, by the model's name for them."""
        listed = await asyncio.gather(*(self._tools_of(s) for s in self.servers.values()))
        return {tool.name: tool for tools in listed for tool in tools}

    async def aclose(self) -> None:
        await asyncio.gather(*(server.close() for server in self.servers.values()))

    async def _tools_of(self, server: McpServer) -> list[Tool]:
        try:
            listed = await server.tools()
        except ServerUnavailable as exc:
            log.error("MCP server left out of this task", server=server.name, error=str(exc))
            return []
        except Exception:  # a listing the SDK cannot read: that server only, never the task
            log.exception("MCP server's tools unreadable; left out", server=server.name)
            return []
        tools: dict[str, Tool] = {}
        for tool in listed:
            name = tool_name(server.name, tool.name)
            if name in tools:  # two names that read the same once cleaned
                name = tool_name(server.name, f"{tool.name}\x00")
            tools[name] = _as_tool(server, name, tool)
        return list(tools.values())


def _as_tool(server: McpServer, name: str, tool: types.Tool) -> Tool:
    hints = tool.annotations
    safe_again = hints is not None and bool(hints.read_only_hint or hints.idempotent_hint)
    description = tool.description or (hints.title if hints and hints.title else "") or tool.name
    schema = tool.input_schema if tool.input_schema.get("type") == "object" else EMPTY_OBJECT

    async def run(ctx: AgentContext, args: dict[str, Any]) -> str:
        try:
            result = await server.call(tool.name, args)
        except ServerUnavailable as exc:
            raise ToolFailed(str(exc)) from exc
        text = result_text(result)
        if result.is_error:
            raise ToolFailed(text or "the tool failed without saying why")
        return text

    return Tool(
        name,
        f"{description} (tool {tool.name!r} of the MCP server {server.name!r})",
        dict(schema),
        True,
        run,
        idempotent=safe_again,
    )
