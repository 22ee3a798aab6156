"""What the chat window shows of a session's past: its latest messages when the window opens
it (the live stream carries only what happens from then on), and the lines the session
picker previews. Messages are anyone's text: shown as the characters they are
(`adapters.terminal.plain`), the agent's replies as Markdown like live ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.widget import Widget
from textual.widgets import Markdown, Static

from adapters.terminal.plain import body, line, plain

HISTORY_SHOWN = 40  # messages a window shows of a session when it opens it
PREVIEW_SHOWN = 6  # messages the picker previews of the highlighted session
PREVIEW_WIDTH = 90


def _who(message: dict[str, Any]) -> str:
    return str(message.get("sender") or message.get("role") or "someone")


def is_reply(message: dict[str, Any]) -> bool:
    return message.get("role") == "assistant"


def widget_of(message: dict[str, Any]) -> Widget:
    """An archived message as the conversation shows it, marked as history."""
    content = str(message.get("content", ""))
    if is_reply(message):
        return Markdown(body(content), classes="reply history")
    return Static(plain(f"{_who(message)}: {content}"), classes="user history")


def preview(messages: Sequence[dict[str, Any]]) -> str:
    """One line a message, the newest last; each cut to the picker's width."""
    if not messages:
        return "no messages yet"
    lines = []
    for message in messages:
        who = "agent" if is_reply(message) else _who(message)
        shown = line(f"{who}: {message.get('content', '')}")
        lines.append(shown if len(shown) <= PREVIEW_WIDTH else shown[: PREVIEW_WIDTH - 1] + "…")
    return "\n".join(lines)
