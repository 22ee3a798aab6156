"""How the fake answers: error bodies, the message's content blocks, and the stream of
server-sent events in the order the API documents: ``message_start``, per block
``content_block_start`` / ``content_block_delta``... / ``content_block_stop`` (a ``ping``
after the first start), ``message_delta`` with the stop reason and output tokens,
``message_stop``."""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from aiohttp import web

from ..base import JSON, DropConnection
from .cache import words
from .checks import signature
from .replies import Cut, StreamError, Text, ToolUse

DEFAULT_THINKING = "Let me think this through step by step."
TOKENS_PER_TOOL_USE = 10
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

_PIECE_RE = re.compile(r"\S*\s*")


def error_response(
    status: int, message: str, type_: str | None = None, retry_after: float | None = None
) -> web.Response:
    headers = {"request-id": "req_fake"}
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    fallback = "api_error" if status >= 500 else "invalid_request_error"
    error = {"type": type_ or ERROR_TYPES.get(status, fallback), "message": message}
    return web.json_response(
        {"type": "error", "error": error},
        status=status,
        headers=headers,
    )


def thinking_on(body: JSON) -> bool:
    thinking = body.get("thinking")
    # "adaptive" (the model decides how much to think; the Claude Code CLI asks for it) answers
    # with a thinking block too.
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def content(body: JSON, reply: Text | ToolUse) -> list[JSON]:
    """The blocks of the answer, whole."""
    blocks: list[JSON] = []
    if thinking_on(body):
        text = reply.thinking or DEFAULT_THINKING
        blocks.append({"type": "thinking", "thinking": text, "signature": signature(text)})
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    if isinstance(reply, ToolUse):
        for call_id, name, arguments in reply.calls:
            blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
    return blocks


def output_tokens(blocks: list[JSON]) -> int:
    total = 0
    for block in blocks:
        if block["type"] == "tool_use":
            total += TOKENS_PER_TOOL_USE
        else:
            total += words(block.get("text") or block.get("thinking"))
    return total


def stop_reason(reply: Text | ToolUse) -> str:
    return reply.stop_reason if isinstance(reply, Text) else "tool_use"


def message(message_id: str, model: str, usage: JSON, blocks: list[JSON] | None = None) -> JSON:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks or [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }


def _pieces(text: str) -> list[str]:
    return [p for p in _PIECE_RE.findall(text) if p] or [""]


def _fragments(arguments: str) -> list[str]:
    if len(arguments) < 2:
        return [arguments]
    step = max(1, len(arguments) // max(2, len(arguments) // 8))
    return [arguments[i : i + step] for i in range(0, len(arguments), step)]


class EventStream:
    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response

    @classmethod
    async def open(cls, request: web.Request) -> EventStream:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "request-id": "req_fake",
            }
        )
        await response.prepare(request)
        return cls(response)

    async def send(self, event: JSON) -> None:
        data = json.dumps(event)
        await self.response.write(f"event: {event['type']}\ndata: {data}\n\n".encode())

    async def block(self, index: int, block: JSON) -> None:
        kind = block["type"]
        start: dict[str, Any]
        if kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        else:
            start = {"type": "text", "text": ""}
        await self.send({"type": "content_block_start", "index": index, "content_block": start})
        if index == 0:
            await self.send({"type": "ping"})
        for delta in _deltas(block):
            await self.send({"type": "content_block_delta", "index": index, "delta": delta})
        await self.send({"type": "content_block_stop", "index": index})


def _deltas(block: JSON) -> list[JSON]:
    kind = block["type"]
    if kind == "thinking":
        pieces = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"])]
        return [*pieces, {"type": "signature_delta", "signature": block["signature"]}]
    if kind == "tool_use":
        raw = block["input"]
        text = raw if isinstance(raw, str) else json.dumps(raw)
        return [{"type": "input_json_delta", "partial_json": f} for f in _fragments(text)]
    return [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]


async def stream(
    request: web.Request,
    reply: Text | ToolUse,
    blocks: list[JSON],
    start: JSON,
) -> web.StreamResponse:
    events = await EventStream.open(request)
    await events.send({"type": "message_start", "message": start})
    for index, block in enumerate(blocks):
        await events.block(index, block)
    await events.send(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(reply), "stop_sequence": None},
            "usage": {"output_tokens": output_tokens(blocks)},
        }
    )
    await events.send({"type": "message_stop"})
    await events.response.write_eof()
    return events.response


async def stream_error(request: web.Request, reply: StreamError, start: JSON) -> web.StreamResponse:
    events = await EventStream.open(request)
    await events.send({"type": "message_start", "message": start})
    await events.send({"type": "error", "error": {"type": reply.type, "message": reply.message}})
    await events.response.write_eof()
    return events.response


async def cut(request: web.Request, reply: Cut, start: JSON) -> NoReturn:
    events = await EventStream.open(request)
    await events.send({"type": "message_start", "message": start})
    await events.send(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    )
    for piece in _pieces(reply.text)[: reply.pieces]:
        delta = {"type": "text_delta", "text": piece}
        await events.send({"type": "content_block_delta", "index": 0, "delta": delta})
    raise DropConnection
