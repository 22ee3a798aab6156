"""Text the gateway can keep: what a message, a name or a persona may hold.

Everything stored goes to UTF-8 files and to SQL text columns. A lone surrogate (`"\\udfff"`,
which JSON can carry but UTF-8 cannot) has no encoding at all, so it is refused where text
comes in, before anything is written; a NUL, which PostgreSQL text cannot hold, is stored as
U+FFFD on every backend (the store does that).
"""

from __future__ import annotations


class UnstorableText(ValueError):
    """Text with characters that cannot be stored; the message says which field."""


def check_storable(text: str, what: str = "the text") -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UnstorableText(
            f"{what} holds a character that is not valid Unicode at position {exc.start} "
            "(a lone surrogate)"
        ) from None
    return text
