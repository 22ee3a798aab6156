"""How the fake answers: OpenAI error bodies, completion messages, usage, and the
server-sent-events stream with its tool call fragments."""

from __future__ import annotations

import copy
import json
import re
import time
from typing import Any, NoReturn

from aiohttp import web

from ..base import JSON, DropConnection
from .replies import Cut, Malformed, Text, ToolCalls

TOKENS_PER_TOOL_CALL = 10

_PIECE_RE = re.compile(r"\S*\s*")


def _error_body(status: int, message: str, type_: str | None, code: str | None) -> JSON:
    if type_ is None:
        if status == 429:
            type_ = "requests"
        elif status >= 500:
            type_ = "server_error"
        else:
            type_ = "invalid_request_error"
    if code is None and status == 429:
        code = "rate_limit_exceeded"
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def json_error(
    status: int,
    message: str,
    *,
    type_: str | None = None,
    code: str | None = None,
    retry_after: float | None = None,
) -> web.Response:
    headers: dict[str, str] = {}
    if retry_after is not None:
        headers["Retry-After"] = (
            str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)
        )
    return web.json_response(
        _error_body(status, message, type_, code), status=status, headers=headers
    )


def _words(text: str | None) -> int:
    return len(text.split()) if text else 0


def _content_words(content: Any) -> int:
    if isinstance(content, str):
        return _words(content)
    if isinstance(content, list):
        total = 0
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                total += _words(part["text"])
            elif isinstance(part, str):
                total += _words(part)
        return total
    return 0


def _prompt_tokens(body: JSON) -> int:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return 0
    return sum(_content_words(m.get("content")) for m in messages if isinstance(m, dict))


def _split_pieces(text: str) -> list[str]:
    """Split ``text`` into word-sized pieces that join back to exactly ``text``."""
    pieces = [p for p in _PIECE_RE.findall(text) if p]
    return pieces or [""]


def _split_arguments(arguments: str) -> list[str]:
    """Split a JSON arguments string into at least two fragments (when it has 2+ chars)."""
    if len(arguments) < 2:
        return [arguments]
    count = min(len(arguments), max(2, len(arguments) // 8))
    step = -(-len(arguments) // count)
    return [arguments[i : i + step] for i in range(0, len(arguments), step)]


def _arguments_text(arguments: JSON | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def message(reply: Text | ToolCalls) -> tuple[JSON, str]:
    """The assistant message of a plain answer, and its finish reason."""
    if isinstance(reply, Text):
        return {"role": "assistant", "content": reply.content}, reply.finish_reason
    return {
        "role": "assistant",
        "content": reply.content,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": _arguments_text(arguments)},
            }
            for call_id, name, arguments in reply.calls
        ],
    }, "tool_calls"


def usage(body: JSON, reply: Text | ToolCalls | Malformed) -> JSON:
    """The usage block: tokens are whitespace-separated words, overridable per reply."""
    prompt = _prompt_tokens(body)
    if isinstance(reply, ToolCalls):
        completion = _words(reply.content) + TOKENS_PER_TOOL_CALL * len(reply.calls)
    else:
        completion = _words(reply.content if isinstance(reply, Text) else reply.text)
    usage: JSON = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    override = reply.usage if isinstance(reply, Text | ToolCalls) else None
    if override:
        usage.update(copy.deepcopy(override))
        if "total_tokens" not in override:
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage


async def cut(
    request: web.Request, reply: Cut, completion_id: str, model: str, body: JSON
) -> NoReturn:
    """Stream the first pieces when streaming, then close the connection unanswered."""
    if body.get("stream") is True:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in _split_pieces(reply.text)[: reply.pieces]:
            frame = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
            }
            await response.write(f"data: {json.dumps(frame)}\n\n".encode())
    raise DropConnection


async def stream(
    request: web.Request,
    body: JSON,
    reply: Text | ToolCalls | Malformed,
    completion_id: str,
    model: str,
) -> web.StreamResponse:
    """The ``stream: true`` answer as server-sent events, ending with ``[DONE]``."""
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    created = int(time.time())
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "Connection": "keep-alive",
        }
    )
    await response.prepare(request)

    def chunk(delta: JSON, finish_reason: str | None = None) -> JSON:
        frame: JSON = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if include_usage:
            frame["usage"] = None
        return frame

    async def send(frame: JSON | str) -> None:
        data = frame if isinstance(frame, str) else json.dumps(frame)
        await response.write(f"data: {data}\n\n".encode())

    if isinstance(reply, Malformed):
        await send(reply.line)
    if isinstance(reply, ToolCalls):
        first: JSON = {"role": "assistant", "content": reply.content}
        if reply.content:
            await send(chunk(first))
            first = {}
        for index, (call_id, name, arguments) in enumerate(reply.calls):
            opening: JSON = {
                **first,
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ],
            }
            first = {}
            await send(chunk(opening))
            for fragment in _split_arguments(_arguments_text(arguments)):
                await send(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                )
        await send(chunk({}, "tool_calls"))
    else:
        content = reply.content if isinstance(reply, Text) else reply.text
        for position, piece in enumerate(_split_pieces(content)):
            delta: JSON = {"content": piece}
            if position == 0:
                delta = {"role": "assistant", **delta}
            await send(chunk(delta))
        await send(chunk({}, reply.finish_reason if isinstance(reply, Text) else "stop"))
    if include_usage:
        await send(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage(body, reply),
            }
        )
    await send("[DONE]")
    await response.write_eof()
    return response
