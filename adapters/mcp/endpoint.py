"""`/mcp`: the gateway's MCP server on the API, behind its authentication and guard.

The SDK's Streamable HTTP transport is an ASGI application; this handler hands it one aiohttp
request as ASGI messages and writes back what it answers. The SDK (slow to import) is loaded
when the first request arrives, so a gateway nobody reaches over MCP never loads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from adapters.http.errors import ApiError
from adapters.http.inputs import read_raw
from gateway.logs import get_logger

if TYPE_CHECKING:
    from adapters.http.context import Context
    from adapters.mcp.server import McpService

log = get_logger(__name__)

MCP_PATH: Final = "/mcp"
Message = MutableMapping[str, Any]


class _Reply:
    """What the ASGI application sends, written to the aiohttp response as it comes."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response: web.StreamResponse | None = None

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for name, value in message.get("headers", ()):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            await response.prepare(self._request)
            self.response = response
        elif message["type"] == "http.response.body" and self.response is not None:
            await self.response.write(message.get("body", b""))


class McpEndpoint:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._service: McpService | None = None
        self._starting = asyncio.Lock()

    async def _started(self) -> McpService:
        async with self._starting:
            if self._service is None:
                from adapters.mcp.server import McpService

                service = McpService(self._ctx)
                await service.start()
                self._service = service
                log.info("mcp endpoint started", path=MCP_PATH)
            return self._service

    async def handle(self, request: web.Request) -> web.StreamResponse:
        from adapters.mcp.server import ORIGIN_SCOPE_KEY

        ctx = self._ctx
        if ctx.closing.is_set():
            raise ApiError(503, "restarting", "the gateway is shutting down", {"Retry-After": "5"})
        origin = ctx.origin(request)  # signed in by the API's middleware, never by a header
        body = await read_raw(request, ctx.settings.http_body_timeout_seconds)
        service = await self._started()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": request.scheme,
            "path": request.path,
            "raw_path": request.raw_path.encode("latin-1", "replace"),
            "query_string": request.query_string.encode("latin-1", "replace"),
            "root_path": "",
            "headers": [(name.lower(), value) for name, value in request.raw_headers],
            "client": None,
            "server": None,
            ORIGIN_SCOPE_KEY: origin,
        }
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            # Nothing more comes: the JSON transport never reads past the body.
            await asyncio.Event().wait()
            return {"type": "http.disconnect"}

        reply = _Reply(request)
        await service.manager.handle_request(scope, receive, reply.send)
        if reply.response is None:
            raise ApiError(503, "restarting", "the call was cut short", {"Retry-After": "5"})
        await reply.response.write_eof()
        return reply.response

    async def close(self, app: web.Application) -> None:
        if self._service is not None:
            await self._service.stop()
