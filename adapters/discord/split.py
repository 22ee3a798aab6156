"""Splitting replies for Discord: at most 2,000 characters a message, code blocks kept whole.

Discord renders Markdown itself, so the text is sent as it is; only the cuts need care. A cut
prefers a blank line, then a line break, then a space; a cut inside a fenced code block closes
the fence at the end of the chunk and reopens it (with its language) at the start of the next,
so each message renders on its own.
"""

from __future__ import annotations

import re
from typing import Final

DISCORD_LIMIT: Final = 2000
_FENCE = re.compile(r"^(\s*)(`{3,})([^\s`]*)", re.MULTILINE)


def split_message(text: str, limit: int = DISCORD_LIMIT) -> list[str]:
    if limit < 32:
        raise ValueError("limit too small to hold a reopened code fence")
    chunks: list[str] = []
    rest = text
    reopen = ""  # the fence line to put back at the start of the next chunk
    while rest:
        budget = limit - len(reopen)
        if len(rest) <= budget:
            chunks.append(reopen + rest)
            break
        # Leave room to close a fence that is open where we cut.
        cut = _cut_point(rest, budget - 4)
        piece = rest[:cut]
        fence = _open_fence(reopen + piece)
        if fence is not None:
            chunk = reopen + piece.rstrip("\n") + "\n" + fence[0]
            reopen = fence[0] + fence[1] + "\n"
        else:
            chunk = reopen + piece
            reopen = ""
        chunks.append(chunk)
        rest = rest[cut:]
    return [c for c in chunks if c.strip()] or [text[:limit]]


def _cut_point(text: str, budget: int) -> int:
    window = text[:budget]
    for separator in ("\n\n", "\n", " "):
        at = window.rfind(separator)
        if at >= budget // 2:
            return at + len(separator)
    return budget


def _open_fence(text: str) -> tuple[str, str] | None:
    """The (backticks, language) of a code fence left open at the end of `text`, if any."""
    open_fence: tuple[str, str] | None = None
    for match in _FENCE.finditer(text):
        ticks, lang = match.group(2), match.group(3)
        if open_fence is None:
            open_fence = (ticks, lang)
        elif ticks.startswith(open_fence[0]) and not lang:
            open_fence = None
    return open_fence
