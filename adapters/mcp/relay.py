"""`agenvoy mcp`: the gateway's MCP server for clients that start servers as commands (editors,
desktop agents). It carries JSON-RPC messages between stdio and a running gateway's `/mcp`,
signed in as the local user, as `agenvoy send` is.

Every request is posted on its own, so a long `send_message` does not hold up the others; a
`notifications/cancelled` abandons the request it names. When the gateway cannot be reached or
refuses the credential, the request is answered with a JSON-RPC error saying so, never left
waiting.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Final

import aiohttp

from gateway.logs import get_logger

log = get_logger(__name__)

MAX_LINE_BYTES: Final = 4 * 1024 * 1024
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INTERNAL_ERROR: Final = -32603
# Servers' own errors start here (JSON-RPC reserves -32000 to -32099 for them).
GATEWAY_UNREACHABLE: Final = -32000
GATEWAY_REFUSED: Final = -32001


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _refusal(status: int, body: bytes) -> str:
    try:
        detail = json.loads(body)["error"]
        return f"the gateway answered {status} {detail['code']}: {detail['message']}"
    except (ValueError, KeyError, TypeError):
        return f"the gateway answered {status}"


class Relay:
    def __init__(self, url: str, headers: dict[str, str], session: aiohttp.ClientSession) -> None:
        self.url = url
        self._headers = {
            **headers,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        self._session = session
        self._version: str | None = None
        self._in_flight: dict[Any, asyncio.Task[None]] = {}
        self._out_lock = asyncio.Lock()
        self._out: asyncio.StreamWriter | None = None

    async def run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Relays until stdin ends; requests still in flight then are abandoned."""
        self._out = writer
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # longer than MAX_LINE_BYTES: dropped by the reader
                    text = f"a message is longer than {MAX_LINE_BYTES} bytes"
                    self._spawn(None, self._write(_error(None, INVALID_REQUEST, text)))
                    continue
                if not line:
                    break
                if line.strip():
                    self._take(line)
        finally:
            for task in self._in_flight.values():
                task.cancel()
            await asyncio.gather(*self._in_flight.values(), return_exceptions=True)

    def _take(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self._spawn(None, self._write(_error(None, PARSE_ERROR, "not valid JSON")))
            return
        if not isinstance(message, dict):
            self._spawn(None, self._write(_error(None, INVALID_REQUEST, "not a JSON-RPC message")))
            return
        if message.get("method") == "notifications/cancelled":
            params = message.get("params")
            request_id = params.get("requestId") if isinstance(params, dict) else None
            running = self._in_flight.get(request_id)
            if running is not None:
                running.cancel()
            return
        is_request = "id" in message and "method" in message
        self._spawn(message.get("id") if is_request else None, self._post(message, line))

    def _spawn(self, request_id: Any, work: Any) -> None:
        task = asyncio.create_task(work)
        key = request_id if request_id is not None else object()
        self._in_flight[key] = task
        task.add_done_callback(lambda _: self._in_flight.pop(key, None))

    async def _post(self, message: dict[str, Any], line: bytes) -> None:
        request_id = message.get("id") if "method" in message else None
        headers = dict(self._headers)
        if self._version is not None:
            headers["MCP-Protocol-Version"] = self._version
        try:
            async with self._session.post(self.url, data=line, headers=headers) as response:
                body = await response.read()
                status, kind = response.status, response.content_type
        except aiohttp.ClientError as exc:
            log.warning("gateway unreachable", url=self.url, error=str(exc))
            if request_id is not None:
                text = f"the gateway at {self.url} cannot be reached ({exc}); is it running?"
                await self._write(_error(request_id, GATEWAY_UNREACHABLE, text))
            return
        if status == 202 or request_id is None:
            if status >= 400:
                log.warning("gateway refused a notification", refusal=_refusal(status, body))
            return
        if status >= 400 and kind != "application/json":
            await self._write(_error(request_id, INTERNAL_ERROR, _refusal(status, body)))
            return
        try:
            answer = json.loads(body)
        except ValueError:
            await self._write(_error(request_id, INTERNAL_ERROR, _refusal(status, body)))
            return
        if status >= 400 and not (isinstance(answer, dict) and "jsonrpc" in answer):
            # The API's own error shape (401, 403, 421, 503): said as the request's error.
            await self._write(_error(request_id, GATEWAY_REFUSED, _refusal(status, body)))
            return
        if message.get("method") == "initialize" and isinstance(answer, dict):
            result = answer.get("result")
            if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
                self._version = result["protocolVersion"]
        await self._write(answer)

    async def _write(self, message: Any) -> None:
        assert self._out is not None
        # One message per line: json.dumps escapes every newline inside strings.
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        async with self._out_lock:
            self._out.write(data)
            await self._out.drain()


async def _stdio() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer


async def relay(base_url: str, headers: dict[str, str]) -> None:
    """Serve stdio until it closes, relaying to the gateway at `base_url`."""
    reader, writer = await _stdio()
    # No total timeout: `send_message` may wait minutes for a reply, as it says it does.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await Relay(base_url.rstrip("/") + "/mcp", headers, session).run(reader, writer)
