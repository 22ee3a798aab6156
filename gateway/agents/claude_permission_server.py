"""The MCP server the Claude Code CLI asks before a tool that needs permission runs.

The CLI starts it over stdio (`--mcp-config`) and calls its one tool through
`--permission-prompt-tool`. The tool passes the request on to the gateway's agent over a unix
socket (`claude_permissions.PermissionBridge`, which asks in the chat that started the task)
and hands the answer back as the CLI expects it: `{"behavior": "allow", "updatedInput": …}` or
`{"behavior": "deny", "message": …}`.

Run as `python -m gateway.agents.claude_permission_server`; the socket's path and the run's
secret arrive in its environment (`SOCKET_ENV`, `SECRET_ENV`). It imports nothing of the
gateway beyond this module, so that it starts quickly, and `mcp` only here (the gateway itself
never pays for that import).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

# A name no configured MCP server is likely to take (the CLI would merge the two).
SERVER_NAME = "agenvoy_permissions"
TOOL_NAME = "ask"
# How the CLI names the tool: `mcp__<server>__<tool>`.
PROMPT_TOOL = f"mcp__{SERVER_NAME}__{TOOL_NAME}"
SOCKET_ENV = "AGENVOY_PERMISSION_SOCKET"
SECRET_ENV = "AGENVOY_PERMISSION_SECRET"
# Longest answer line read from the gateway (it echoes the tool's input back).
ANSWER_LIMIT = 32 * 1024 * 1024


def deny(message: str) -> str:
    return json.dumps({"behavior": "deny", "message": message})


async def ask_gateway(
    socket_path: str, secret: str, tool_name: str, tool_input: dict[str, Any], tool_use_id: str
) -> str:
    """The gateway's answer to one permission request, as the JSON text the CLI reads."""
    request = {
        "secret": secret,
        "tool_name": tool_name,
        "input": tool_input,
        "tool_use_id": tool_use_id,
    }
    try:
        reader, writer = await asyncio.open_unix_connection(socket_path, limit=ANSWER_LIMIT)
    except OSError as exc:
        return deny(f"the gateway cannot be asked for permission: {exc}")
    try:
        writer.write(json.dumps(request).encode() + b"\n")
        await writer.drain()
        line = await reader.readline()
    except (OSError, ValueError) as exc:
        return deny(f"the gateway did not answer the permission request: {exc}")
    finally:
        writer.close()
    try:
        answer = json.loads(line)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or answer.get("behavior") not in ("allow", "deny"):
        # Nothing usable (the task ended while asking): refusing is the only safe answer.
        return deny("the gateway gave no answer to the permission request")
    return json.dumps(answer)


def main() -> None:
    from mcp.server.mcpserver import MCPServer

    socket_path = os.environ.get(SOCKET_ENV, "")
    secret = os.environ.get(SECRET_ENV, "")
    server: MCPServer[Any] = MCPServer(SERVER_NAME, log_level="WARNING")

    @server.tool(
        name=TOOL_NAME,
        description="Asks the user in the gateway's chat whether a tool call may run.",
        structured_output=False,
    )
    # `input` is the CLI's own name for the argument.
    async def permission(tool_name: str, input: dict[str, Any], tool_use_id: str = "") -> str:
        return await ask_gateway(socket_path, secret, tool_name, input, tool_use_id)

    asyncio.run(server.run_stdio_async())


if __name__ == "__main__":
    main()
