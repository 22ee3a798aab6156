"""A fake OpenAI-compatible chat-completions server for tests of the agent's model client.

Point a client at it with::

    async with FakeOpenAI() as fake:
        fake.script(Text("hello"), ToolCalls([("call_1", "read_file", {"name": "a.txt"})]))
        client = SomeClient(base_url=fake.url, api_key=fake.api_key)

The server listens on 127.0.0.1 on a free port and serves ``POST /v1/chat/completions``.
Replies come from a script the test queues with :meth:`FakeOpenAI.script`, one reply per
request, in arrival order; once the script runs out every request gets
``Text("(no scripted reply)")``. Both the plain JSON answer and the ``stream: true``
server-sent-events answer are produced, including ``stream_options.include_usage``.

Every authorised request body is kept in ``requests``; :meth:`FakeOpenAI.wait_for_request`
waits for one. Requests with a wrong or missing key get a 401 and are not recorded.
``drop_next(CHAT_ROUTE)`` closes the connection of the next request before the script is
consulted.

Not simulated: models other than echoing the requested name, ``n > 1``, logprobs, images,
the Responses API and real tokenisation (tokens are counted as whitespace-separated words).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeAlias

from aiohttp import web

from .base import (
    DEFAULT_TIMEOUT,
    JSON,
    BodyPredicate,
    CallRecord,
    DropConnection,
    RecordingServer,
)

CHAT_ROUTE = "POST /v1/chat/completions"
DEFAULT_API_KEY = "sk-test-fake"
DEFAULT_MODEL = "fake-model"
NO_SCRIPTED_REPLY = "(no scripted reply)"
TOKENS_PER_TOOL_CALL = 10

_PIECE_RE = re.compile(r"\S*\s*")


# ---------------------------------------------------------------------------------------------
# Script entries


@dataclass(frozen=True)
class Text:
    """An assistant message with ``content``.

    ``usage`` overrides keys of the computed usage block (``prompt_tokens``,
    ``completion_tokens``, ``total_tokens``, ``prompt_tokens_details``...);
    ``total_tokens`` is recomputed unless given.
    """

    content: str
    usage: JSON | None = None
    finish_reason: str = "stop"


@dataclass(frozen=True)
class ToolCalls:
    """An assistant message asking for tool calls; several calls are parallel calls.

    Each call is ``(call_id, function_name, arguments)``; ``arguments`` is a dict sent as a
    JSON string, or a string sent verbatim (to test arguments that do not parse).
    """

    calls: Sequence[tuple[str, str, JSON | str]]
    usage: JSON | None = None
    content: str | None = None


@dataclass(frozen=True)
class Error:
    """An HTTP error with an OpenAI-style error body and, when given, a Retry-After header.

    ``type`` and ``code`` default to what OpenAI sends for the status.
    """

    status: int
    message: str
    retry_after: float | None = None
    type: str | None = None
    code: str | None = None


@dataclass(frozen=True)
class Slow:
    """Wait ``seconds`` before starting to answer ``reply``."""

    seconds: float
    reply: Reply


@dataclass(frozen=True)
class Malformed:
    """Streaming: a ``data:`` line that is not JSON, then ``text`` streamed as usual.

    Non-streaming: a 200 answer whose JSON body is cut short.
    """

    text: str = "recovered"
    line: str = '{"id": "chatcmpl-broken", "choices": [{'


@dataclass(frozen=True)
class Cut:
    """Streaming: the first ``pieces`` pieces of ``text``, then the connection drops (no
    finish reason, no ``[DONE]``). Non-streaming: the connection drops before any answer."""

    text: str
    pieces: int = 2


Reply: TypeAlias = Text | ToolCalls | Error | Slow | Malformed | Cut


# ---------------------------------------------------------------------------------------------
# Helpers


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


def _json_error(
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


# ---------------------------------------------------------------------------------------------
# The server


class FakeOpenAI(RecordingServer[CallRecord]):
    """An OpenAI-compatible ``/v1/chat/completions`` server answering from a script."""

    def __init__(self, api_key: str = DEFAULT_API_KEY) -> None:
        super().__init__()
        self.api_key = api_key
        self._script: deque[Reply] = deque()
        self._ids = itertools.count(1)

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle_chat)
        return app

    @property
    def url(self) -> str:
        """Base URL ``http://127.0.0.1:<port>/v1``; only valid after :meth:`start`."""
        return f"{super().url}/v1"

    # -- test-side control ---------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one, in arrival order."""
        self._script.extend(replies)

    @property
    def pending(self) -> int:
        """How many scripted replies have not been used yet."""
        return len(self._script)

    @property
    def requests(self) -> list[JSON]:
        """Every authorised request body, in arrival order."""
        return [record.data for record in self.call_log]

    def reset(self) -> None:
        """Forget recorded requests and the remaining script."""
        self._forget_calls()
        self._script.clear()

    def last_messages(self) -> list[JSON]:
        """The ``messages`` of the latest recorded request."""
        if not self.call_log:
            raise AssertionError("FakeOpenAI has received no request")
        messages = self.call_log[-1].data.get("messages")
        return list(messages) if isinstance(messages, list) else []

    async def wait_for_request(
        self,
        predicate: BodyPredicate = lambda body: True,
        timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - a per-call deadline reads best in tests
    ) -> JSON:
        """Wait for a recorded request whose body matches ``predicate`` and return the body.

        Requests received before the wait count too, but each is handed out once: waiting
        twice gives the first and then the second. The request is recorded before it is
        answered, so this also returns while a ``Slow`` reply is still sleeping. Raises
        ``AssertionError`` when nothing matches within ``timeout``.
        """
        record = await self._wait_for(
            lambda record: predicate(record.data), timeout, "matching chat completion request"
        )
        return record.data

    # -- request handling ----------------------------------------------------------------------

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization", "") != f"Bearer {self.api_key}":
            return _json_error(
                401,
                "Incorrect API key provided",
                type_="invalid_request_error",
                code="invalid_api_key",
            )
        try:
            body = await request.json()
        except ValueError:
            return _json_error(400, "We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return _json_error(400, "The request body must be a JSON object.")
        if not isinstance(body.get("messages"), list):
            return _json_error(400, "Missing required parameter: 'messages'.", code=None)
        return await self._answer(
            request, CallRecord(CHAT_ROUTE, body), lambda record: self._reply(request, record)
        )

    async def _reply(self, request: web.Request, record: CallRecord) -> web.StreamResponse:
        self._fail_if_queued(record)
        body = record.data
        reply: Reply = self._script.popleft() if self._script else Text(NO_SCRIPTED_REPLY)
        while isinstance(reply, Slow):
            await asyncio.sleep(reply.seconds)
            reply = reply.reply
        if isinstance(reply, Error):
            return _json_error(
                reply.status,
                reply.message,
                type_=reply.type,
                code=reply.code,
                retry_after=reply.retry_after,
            )
        completion_id = f"chatcmpl-fake-{next(self._ids)}"
        model = body.get("model") if isinstance(body.get("model"), str) else DEFAULT_MODEL
        if isinstance(reply, Cut):
            await self._cut(request, reply, completion_id, str(model), body)
        if body.get("stream") is True:
            return await self._stream(request, body, reply, completion_id, str(model))
        if isinstance(reply, Malformed):
            return web.Response(status=200, text=reply.line, content_type="application/json")
        message, finish_reason = self._message(reply)
        return web.json_response(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                ],
                "usage": self._usage(body, reply),
            }
        )

    @staticmethod
    def _message(reply: Text | ToolCalls) -> tuple[JSON, str]:
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

    @staticmethod
    def _usage(body: JSON, reply: Text | ToolCalls | Malformed) -> JSON:
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

    async def _cut(
        self, request: web.Request, reply: Cut, completion_id: str, model: str, body: JSON
    ) -> NoReturn:
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

    async def _stream(
        self,
        request: web.Request,
        body: JSON,
        reply: Text | ToolCalls | Malformed,
        completion_id: str,
        model: str,
    ) -> web.StreamResponse:
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
                        chunk(
                            {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
                        )
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
                    "usage": self._usage(body, reply),
                }
            )
        await send("[DONE]")
        await response.write_eof()
        return response
