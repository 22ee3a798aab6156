"""What a test scripts: one entry per chat completion request, taken in arrival order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from ..base import JSON


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
