"""The tools of `tools.py` as an MCP server (the SDK's low-level `Server`), and the
Streamable HTTP transport that serves it inside the API's aiohttp application.

The transport is stateless and answers JSON: every request stands alone, so any instance
behind a load balancer can answer it, and nothing is kept per client between requests. Who
calls comes from the API's own authentication, handed to the tools in the request's scope.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Final

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel

from adapters.http.errors import known_error
from adapters.http.inputs import read_arguments
from adapters.mcp.tools import TOOLS, TOOLS_BY_NAME
from gateway.events import Origin
from gateway.logs import get_logger

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from adapters.http.context import Context

log = get_logger(__name__)

# Where the endpoint puts the caller's identity in the request's scope.
ORIGIN_SCOPE_KEY: Final = "agenvoy.origin"
SERVER_NAME: Final = "agenvoy"


def _failed(message: str) -> types.CallToolResult:
    # An error a tool reports is a result the model can read, not a protocol error.
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def _answer(result: BaseModel) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=result.model_dump_json())],
        structured_content=result.model_dump(mode="json"),
    )


def _caller(request: Any) -> Origin | None:
    scope = getattr(request, "scope", None)
    origin = scope.get(ORIGIN_SCOPE_KEY) if isinstance(scope, dict) else None
    return origin if isinstance(origin, Origin) else None


def build_server(ctx: Context) -> Server[Any]:
    """An MCP server over the gateway of `ctx`."""
    listing = types.ListToolsResult(
        tools=[
            types.Tool(
                name=tool.name,
                description=tool.description,
                input_schema=tool.arguments.model_json_schema(),
                annotations=types.ToolAnnotations(
                    read_only_hint=tool.read_only,
                    destructive_hint=False,
                    open_world_hint=False,
                ),
            )
            for tool in TOOLS
        ]
    )

    async def list_tools(
        request: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(
        request: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = TOOLS_BY_NAME.get(params.name)
        if tool is None:
            return _failed(f"there is no tool named {params.name!r}")
        who = _caller(request.request)
        if who is None:
            # Only the endpoint below serves this server, and it always signs the caller in.
            return _failed("unauthorized: the caller is not signed in")
        try:
            arguments = read_arguments(tool.arguments, params.arguments or {})
            return _answer(await tool.run(ctx, who, arguments))
        except Exception as exc:
            known = known_error(exc)
            if known is None and isinstance(exc, ValueError):
                return _failed(f"bad_request: {exc}")
            if known is None:
                log.exception("mcp tool failed", tool=tool.name, by=who.sender_key)
                return _failed("internal: internal error")
            return _failed(f"{known.code}: {known.message}")

    schemas = {tool.name: tool.arguments.model_json_schema() for tool in TOOLS}
    return Server(
        SERVER_NAME,
        version="1",
        instructions=(
            "The sessions of an agenvoy gateway: read and search their history, send messages "
            "as yourself and wait for the reply, and answer the prompts you may answer."
        ),
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


class McpService:
    """The Streamable HTTP side of the server, run for the life of the API application."""

    def __init__(self, ctx: Context) -> None:
        self.manager = StreamableHTTPSessionManager(
            build_server(ctx),
            stateless=True,
            json_response=True,
            # The API's guard already refuses foreign hosts and origins (DNS rebinding).
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._stop = asyncio.Event()
        self._running: asyncio.Task[None] | None = None

    async def start(self) -> None:
        started = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await self._stop.wait()

        self._running = asyncio.create_task(run(), name="mcp-endpoint")
        waiting = asyncio.ensure_future(started.wait())
        await asyncio.wait({waiting, self._running}, return_when=asyncio.FIRST_COMPLETED)
        if self._running.done():
            waiting.cancel()
            self._running.result()  # it failed to start: say why

    async def stop(self) -> None:
        """Cancels the calls still running; their clients get the API's `restarting` answer."""
        self._stop.set()
        if self._running is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._running
