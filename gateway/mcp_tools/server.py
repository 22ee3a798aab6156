"""One MCP server, as the gateway's client of it: started on first use, restarted after it
died, stopped with the gateway.

The SDK's client lives inside async context managers whose cancel scopes belong to the task
that entered them, so each connection has a task of its own (`_serve`) that enters them, says
when it is ready, and leaves them when asked to stop; calls from any task go through the
connected client. A call that finds the connection closed (the process died, the HTTP server
went away) drops the connection: the next call starts the server again, with a short backoff
between failed starts.

A stdio server runs with the environment its config gives over a few basics (PATH, HOME, the
user's name and shell: the SDK's defaults), never the gateway's own environment and so none
of its secrets; its stderr goes to the gateway's log, a line at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from gateway.logs import get_logger
from gateway.mcp_tools.config import McpServerConfig

log = get_logger(__name__)

START_ATTEMPTS = 3
# After a server failed all its start attempts, tasks go without it this long rather than
# each waiting for it to fail again.
RETRY_AFTER_SECONDS = 30.0
STDERR_LINE_CHARS = 2000
# What an MCP HTTP client waits for: a response stream may stay open for long.
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class ServerUnavailable(Exception):
    """The server could not be started or reached; the message says why."""


class McpServer:
    def __init__(
        self, config: McpServerConfig, *, call_timeout: float, start_timeout: float
    ) -> None:
        self.config = config
        self.name = config.name
        self.call_timeout = call_timeout
        self.start_timeout = start_timeout
        self._client: Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._tools: list[types.Tool] | None = None
        self._retry_at = 0.0  # loop time before which a failed server is not started again
        self.starts = 0  # how many times a connection was made (a restart counts)

    @property
    def running(self) -> bool:
        return self._client is not None

    @property
    def listed(self) -> bool:
        """Whether its tools are listed (a change the server announces unlists them)."""
        return self._tools is not None

    async def tools(self) -> list[types.Tool]:
        """The server's tools, listed once per connection (again after `list_changed`)."""
        client = await self._connected()
        if self._tools is None:
            tools: list[types.Tool] = []
            cursor: str | None = None
            try:
                while True:
                    async with asyncio.timeout(self.start_timeout):
                        page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
            except (MCPError, TimeoutError, OSError) as exc:
                await self._drop(client)
                reason = f"the MCP server {self.name!r} did not list its tools: {_reason(exc)}"
                raise ServerUnavailable(reason) from exc
            self._tools = tools
        return self._tools

    async def call(self, tool: str, args: dict[str, Any]) -> types.CallToolResult:
        """One tools/call; ServerUnavailable when the server is gone or did not answer in
        time (a timed-out call may still be running there)."""
        client = await self._connected()
        try:
            return await client.call_tool(tool, args, read_timeout_seconds=self.call_timeout)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                await self._drop(client)
                raise ServerUnavailable(
                    f"the MCP server {self.name!r} stopped during the call "
                    "(it is started again on the next call)"
                ) from exc
            if exc.code == types.REQUEST_TIMEOUT:
                raise ServerUnavailable(
                    f"the MCP server {self.name!r} did not answer within {self.call_timeout:g} s"
                ) from exc
            reason = f"the MCP server {self.name!r} refused the call: {exc.message}"
            raise ServerUnavailable(reason) from exc
        except OSError as exc:
            await self._drop(client)
            raise ServerUnavailable(f"the MCP server {self.name!r} is unreachable: {exc}") from exc

    async def close(self) -> None:
        """Stop the server (a stdio server's process is ended); a later call starts it again."""
        async with self._lock:
            await self._stop_runner()

    async def _connected(self) -> Client:
        async with self._lock:
            if self._client is not None:
                return self._client
            loop = asyncio.get_running_loop()
            if loop.time() < self._retry_at:
                wait = self._retry_at - loop.time()
                raise ServerUnavailable(
                    f"the MCP server {self.name!r} failed to start; tried again in {wait:.0f} s"
                )
            retrying = AsyncRetrying(
                retry=retry_if_exception_type(ServerUnavailable),
                stop=stop_after_attempt(START_ATTEMPTS),
                wait=wait_exponential(multiplier=0.2, max=2.0),
                reraise=True,
            )
            try:
                async for attempt in retrying:
                    with attempt:
                        self._client = await self._start()
            except ServerUnavailable:
                self._retry_at = loop.time() + RETRY_AFTER_SECONDS
                raise
            assert self._client is not None
            return self._client

    async def _start(self) -> Client:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        runner = asyncio.create_task(self._serve(ready, stop), name=f"mcp:{self.name}")
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self.start_timeout)
        except BaseException as exc:
            stop.set()
            runner.cancel()
            with contextlib.suppress(BaseException):
                await runner
            if isinstance(exc, Exception):
                log.warning("MCP server did not start", server=self.name, error=_reason(exc))
                reason = f"the MCP server {self.name!r} did not start: {_reason(exc)}"
                raise ServerUnavailable(reason) from exc
            raise
        self._runner, self._stop, self._tools = runner, stop, None
        self.starts += 1
        log.info("MCP server started", server=self.name, start=self.starts)
        return client

    async def _serve(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Holds one connection open until `stop`, in this task (the SDK's scopes want it)."""
        try:
            client = Client(self._transport(), cache=None, message_handler=self._on_message)
            async with client:
                ready.set_result(client)
                watching = asyncio.create_task(self._watch(client, stop))
                try:
                    await stop.wait()
                finally:
                    watching.cancel()
                    with contextlib.suppress(BaseException):
                        await watching
                    if self._client is client:  # it ended by itself: the next use restarts
                        self._client, self._tools = None, None
        except BaseException as exc:
            if not ready.done():
                if isinstance(exc, Exception):
                    ready.set_exception(exc)
                else:
                    ready.cancel()
            elif isinstance(exc, Exception):
                log.warning("MCP server connection ended", server=self.name, error=_reason(exc))
            if not isinstance(exc, Exception):
                raise

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        config = self.config
        if config.is_http:
            async with (
                httpx2.AsyncClient(headers=config.headers, timeout=HTTP_TIMEOUT) as http,
                streamable_http_client(config.url, http_client=http) as streams,
            ):
                yield streams
            return
        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=config.env, cwd=config.cwd or None
        )
        async with _stderr_to_log(self.name) as errlog, stdio_client(params, errlog) as streams:
            yield streams

    async def _on_message(self, message: IncomingMessage) -> None:
        # How a server of the handshake-era protocol says its tools changed.
        if isinstance(message, types.ToolListChangedNotification):
            self._tools = None  # listed again on the next use

    async def _watch(self, client: Client, stop: asyncio.Event) -> None:
        """How a server of the newer protocol says its tools changed: a listen stream, in a
        task of its own (its scopes belong to the task that opens it). The stream dropping
        is the connection dropping: a server that died while idle is started again on its
        next use instead of failing that call."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _change in changes:
                    self._tools = None
        except SubscriptionLost:
            log.warning("MCP server connection lost", server=self.name)
            stop.set()
        except Exception as exc:  # an older server, or one that does not say: listed once
            log.debug("no tool list changes from the MCP server", server=self.name, why=str(exc))

    async def _drop(self, client: Client) -> None:
        async with self._lock:
            if self._client is client:
                log.warning("MCP server connection lost", server=self.name)
                await self._stop_runner()

    async def _stop_runner(self) -> None:
        runner, stop = self._runner, self._stop
        self._client, self._runner, self._stop, self._tools = None, None, None, None
        if runner is None or stop is None:
            return
        stop.set()
        # The SDK closes stdin, waits, then ends the process group: bounded on its side.
        try:
            await asyncio.wait_for(asyncio.shield(runner), 10.0)
        except TimeoutError:
            runner.cancel()
            with contextlib.suppress(BaseException):
                await runner
        log.info("MCP server stopped", server=self.name)


@contextlib.asynccontextmanager
async def _stderr_to_log(server: str) -> AsyncIterator[Any]:
    """A pipe for a server's stderr, read into the log, a line at a time."""
    read_fd, write_fd = os.pipe()
    writer = os.fdopen(write_fd, "w")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb")
    )

    async def forward() -> None:
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # a line past the limit: skip what was read of it
                continue
            if not line:
                return
            text = line.decode("utf-8", errors="replace").rstrip()
            if text:
                log.info("MCP server stderr", server=server, line=text[:STDERR_LINE_CHARS])

    forwarding = asyncio.create_task(forward())
    try:
        yield writer
    finally:
        writer.close()  # the child keeps its own copy until it exits; then the reader ends
        try:
            await asyncio.wait_for(asyncio.shield(forwarding), 2.0)
        except (TimeoutError, asyncio.CancelledError):
            forwarding.cancel()
        transport.close()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
