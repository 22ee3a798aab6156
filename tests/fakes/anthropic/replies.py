"""What a test scripts: one entry per Messages API request, taken in arrival order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from ..base import JSON


@dataclass(frozen=True)
class Text:
    """An assistant message of text, preceded by a thinking block when the request enables
    extended thinking (``thinking`` is its text; a default one is made up when not given)."""

    text: str
    thinking: str | None = None
    stop_reason: str = "end_turn"


@dataclass(frozen=True)
class ToolUse:
    """An assistant message asking for tool calls, optionally after some text.

    Each call is ``(tool_use_id, name, input)``; ``input`` is a dict streamed as JSON in
    fragments, or a string streamed verbatim (to test input that does not parse).
    """

    calls: Sequence[tuple[str, str, JSON | str]]
    text: str = ""
    thinking: str | None = None


@dataclass(frozen=True)
class Error:
    """An HTTP error with an Anthropic error body (``type`` defaults to what the API sends
    for the status) and, when given, a ``retry-after`` header in seconds."""

    status: int
    message: str
    retry_after: float | None = None
    type: str | None = None


@dataclass(frozen=True)
class StreamError:
    """A 200 stream that starts the message, then sends an ``error`` event (the API's way
    of failing after the status line went out, e.g. ``overloaded_error``)."""

    type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass(frozen=True)
class Cut:
    """The first ``pieces`` pieces of ``text`` streamed, then the connection drops (no
    ``message_stop``)."""

    text: str
    pieces: int = 2


@dataclass(frozen=True)
class Slow:
    """Wait ``seconds`` before starting to answer ``reply``."""

    seconds: float
    reply: Reply


Reply: TypeAlias = Text | ToolUse | Error | StreamError | Cut | Slow
