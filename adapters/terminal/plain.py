"""Text from the gateway as the chat window shows it: never read as markup (`[b]`,
`[@click=app.quit]`), its control characters shown as escapes (`\\x1b`). A message, a session's
name, a tool's arguments or result can then neither crash the window, nor add an action to it,
nor reach the operator's terminal as a command (a window title, a cleared screen)."""

from __future__ import annotations

from textual.content import Content

from gateway.cli_support import printable


def line(text: str) -> str:
    """`text` on one line, its control characters visible."""
    return printable(text)


def body(text: str) -> str:
    """A message body: its line breaks and tabs kept, every other control character visible."""
    return printable(text, body="")


def plain(text: str) -> Content:
    """`text` (line breaks kept) for a widget, as the characters it is made of."""
    return Content(body(text))
