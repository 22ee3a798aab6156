"""Pages of a listing, the same for every listing of the API: `limit` (bounded, with a
default) items after an opaque `cursor`, and the answer's `next_cursor` for the page after.

A cursor holds the sort key of the last item a page showed (keyset paging), so a page never
shows an item twice nor skips one while new items arrive, and the query reads no more rows
than the page. It is base64url JSON (`["h", 1234]`): a listing's tag, then the key. It grants
nothing: the listing applies the caller's visibility in the same query, whatever the cursor
says; one the listing did not write is a 400.
`/v1/sessions` keeps the cursor it had before (`updated_at~session_id`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Final, TypeVar, cast

from pydantic import AfterValidator, Field

T = TypeVar("T")
Key = tuple[int | str, ...]

CURSOR_MAX_CHARS: Final = 400
CURSOR_PATTERN: Final = r"^[A-Za-z0-9_-]*$"
CURSOR_DESCRIPTION: Final = "Where the page starts: the `next_cursor` of the page before."


class BadCursor(ValueError):
    """A cursor another listing wrote, or none wrote: answered 400 (errors.py)."""

    def __init__(self) -> None:
        super().__init__("not a cursor this listing gave")


def _decode(text: str) -> list[object]:
    padded = text + "=" * (-len(text) % 4)
    try:
        decoded = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadCursor from None
    if not isinstance(decoded, list) or len(decoded) < 2 or not isinstance(decoded[0], str):
        raise BadCursor
    return decoded


def _well_formed(text: str) -> str:
    _decode(text)
    return text


Cursor = Annotated[
    str,
    Field(max_length=CURSOR_MAX_CHARS, pattern=CURSOR_PATTERN, description=CURSOR_DESCRIPTION),
    AfterValidator(_well_formed),
]


def limit_field(default: int, most: int) -> Any:
    """The `limit` of a listing's query: 1 to `most`, `default` when absent."""
    return Field(default, ge=1, le=most, description=f"Page size: at most {most}.")


def encode_cursor(tag: str, *key: int | str) -> str:
    raw = json.dumps([tag, *key], separators=(",", ":"), ensure_ascii=True).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def read_cursor(text: str | None, tag: str, *shape: type[int] | type[str]) -> Key | None:
    """The key a cursor of listing `tag` holds, its parts of the types `shape` names; None
    without one; 400 for a cursor of another listing or shape."""
    if text is None:
        return None
    decoded = _decode(text)
    key = decoded[1:]
    fits = len(key) == len(shape) and all(
        _fits(part, kind) for part, kind in zip(key, shape, strict=True)
    )
    if decoded[0] != tag or not fits:
        raise BadCursor
    return cast(Key, tuple(key))


def _fits(part: object, kind: type[int] | type[str]) -> bool:
    if kind is str:
        return type(part) is str
    # An id or a time: what an SQL BIGINT holds (bool is no int here).
    return type(part) is int and 0 <= part < 2**63


def page_of(
    found: Sequence[T], limit: int, tag: str, key: Callable[[T], Key]
) -> tuple[list[T], str | None]:
    """The page of `found` (asked for with `limit + 1`, so one more tells there is a next
    page) and the cursor of the page after it, None on the last."""
    shown = list(found[:limit])
    if len(found) <= limit or not shown:
        return shown, None
    return shown, encode_cursor(tag, *key(shown[-1]))
