"""Claude Code's permission requests, asked in the chat that started the task.

The CLI asks before a tool that needs permission runs (a Write, a Bash command beyond its
read-only ones) by calling the permission tool of a small MCP server it starts itself
(`claude_permission_server`). That server reaches back here over a unix socket in a private
directory, with a secret made for the run: each request becomes a `PermissionRequest` the
agent takes between two events of the CLI and answers with `ctx.confirm`, so it is asked, and
answered by the requester or an admin, like any other tool's confirmation.

`cli_mcp_config` builds the CLI's `--mcp-config` document from server entries, so other MCP
servers can be handed to the CLI next to this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.agents.claude_permission_server import (
    ANSWER_LIMIT,
    SECRET_ENV,
    SERVER_NAME,
    SOCKET_ENV,
)
from gateway.logs import get_logger

log = get_logger(__name__)

# Longest permission request read (a Write carries the whole file it writes).
REQUEST_LIMIT = ANSWER_LIMIT


@dataclass
class PermissionRequest:
    """One tool call the CLI wants to run; `answer` takes the gateway's decision."""

    tool: str
    args: dict[str, Any]
    tool_use_id: str
    answer: asyncio.Future[bool] = field(repr=False)


def cli_mcp_config(*servers: Mapping[str, Any]) -> dict[str, Any]:
    """The CLI's `--mcp-config` document holding every server entry given (name → entry)."""
    merged: dict[str, Any] = {}
    for entries in servers:
        merged.update(entries)
    return {"mcpServers": merged}


class PermissionBridge:
    """The socket the permission server calls during one CLI run; `async with` closes it."""

    def __init__(self, folder: Path, server: asyncio.Server) -> None:
        self.folder = folder
        self.socket_path = folder / "permission.sock"
        self.secret = secrets.token_hex(32)
        self.requests: asyncio.Queue[PermissionRequest] = asyncio.Queue()
        self._server = server
        self._handlers: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls) -> PermissionBridge:
        # mkdtemp makes the folder 0700: nobody else can reach the socket inside.
        folder = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="agenvoy-cc-"))
        bridge: PermissionBridge | None = None

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            assert bridge is not None
            await bridge._serve(reader, writer)

        try:
            server = await asyncio.start_unix_server(
                handle, path=str(folder / "permission.sock"), limit=REQUEST_LIMIT
            )
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, folder, True)
            raise
        bridge = cls(folder, server)
        return bridge

    def mcp_server(self, answer_within: float) -> dict[str, Any]:
        """This run's permission server, as an entry of `cli_mcp_config`; the CLI waits up to
        `answer_within` seconds for an answer (a person may take a while)."""
        return {
            SERVER_NAME: {
                "type": "stdio",
                "command": sys.executable,
                # Isolated: neither the workspace (the working directory) nor PYTHONPATH can
                # plant a module in it.
                "args": ["-I", "-m", "gateway.agents.claude_permission_server"],
                "env": {SOCKET_ENV: str(self.socket_path), SECRET_ENV: self.secret},
                # The CLI's limit for one call of the tool, in milliseconds.
                "timeout": int(answer_within * 1000),
            }
        }

    async def write_config(self, config: dict[str, Any]) -> Path:
        """`config` as a file only this user can read: on the command line, the secret would
        show in every process listing."""
        path = self.folder / "mcp.json"

        def write() -> None:
            with open(path, "x", encoding="utf-8") as out:
                path.chmod(0o600)
                json.dump(config, out)

        await asyncio.to_thread(write)
        return path

    async def __aenter__(self) -> PermissionBridge:
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.close()
        for handler in list(self._handlers):
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        # Requests still queued were never asked: they are refused, nobody is left waiting.
        while not self.requests.empty():
            request = self.requests.get_nowait()
            if not request.answer.done():
                request.answer.set_result(False)
        await asyncio.to_thread(shutil.rmtree, self.folder, True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            request = await self._read(reader)
            if request is None:
                return
            await self.requests.put(request)
            allowed = await request.answer
            reply = (
                {"behavior": "allow", "updatedInput": request.args}
                if allowed
                else {"behavior": "deny", "message": "The user denied this tool call."}
            )
            writer.write(json.dumps(reply).encode() + b"\n")
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        except (ConnectionError, ValueError) as exc:
            log.warning("a Claude Code permission request failed", error=str(exc))
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _read(self, reader: asyncio.StreamReader) -> PermissionRequest | None:
        try:
            body = json.loads(await reader.readline())
        except ValueError:
            body = None
        if not isinstance(body, dict) or not hmac.compare_digest(
            str(body.get("secret") or ""), self.secret
        ):
            log.warning("refused a permission request without this run's secret")
            return None
        args = body.get("input")
        return PermissionRequest(
            tool=str(body.get("tool_name") or "tool"),
            args=args if isinstance(args, dict) else {},
            tool_use_id=str(body.get("tool_use_id") or ""),
            answer=asyncio.get_running_loop().create_future(),
        )
