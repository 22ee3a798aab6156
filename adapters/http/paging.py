"""Pages of a listing, the same for every listing of the API: `limit` (bounded, with a
default) items after a `cursor`, and the answer's `next_cursor` for the page after.

A cursor holds the sort key of the last item a page showed (keyset paging), so a page never
shows an item twice nor skips one while new items arrive, and the query reads no more rows
than the page. Clients pass it back as given (its form is the listing's business); the
document gives each listing's form as a pattern, and any text of that form is a cursor: it
grants nothing, since the listing applies the caller's visibility in the same query whatever
it says. Forms: an id (`1234`), an expiry and a task (`1733385600000~ab12`), or a name after
`~` (`~http:ann`). `/v1/sessions` keeps the cursor it had (`updated_at~session_id`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Final, TypeVar

from pydantic import Field

from gateway.ids import HASH_RE

T = TypeVar("T")
Key = tuple[int | str, ...]
Shape = tuple[type[int] | type[str], ...]

CURSOR_DESCRIPTION: Final = "Where the page starts: the `next_cursor` of the page before."
# Under 10**18: what an SQL BIGINT holds, whatever the digits.
_ID: Final = r"[0-9]{1,18}"
_FORMS: Final[dict[Shape, str]] = {
    (int,): _ID,
    (int, str): rf"{_ID}~{HASH_RE.pattern}",
    (str,): "~[^\u0000]{0,300}",
}


class BadCursor(ValueError):
    """A cursor not of the listing's form (the console's addresses; the API's query models
    refuse one by its pattern): answered 400 (errors.py)."""

    def __init__(self) -> None:
        super().__init__("not a cursor this listing gave")


def _pattern(*shape: type[int] | type[str]) -> str:
    # Empty is allowed in the document as everywhere: a blank parameter is an absent one.
    return f"^({_FORMS[shape]})?$"


# A listing's `cursor` parameter, by the form of its key.
IdCursor = Annotated[
    str, Field(pattern=_pattern(int), max_length=18, description=CURSOR_DESCRIPTION)
]
PromptCursor = Annotated[
    str, Field(pattern=_pattern(int, str), max_length=90, description=CURSOR_DESCRIPTION)
]
NameCursor = Annotated[
    str, Field(pattern=_pattern(str), max_length=301, description=CURSOR_DESCRIPTION)
]


def limit_field(default: int, most: int) -> Any:
    """The `limit` of a listing's query: 1 to `most`, `default` when absent."""
    return Field(default, ge=1, le=most, description=f"Page size: at most {most}.")


def encode_cursor(*key: int | str) -> str:
    """The cursor of a page that ends at the item of `key`."""
    if len(key) == 1 and isinstance(key[0], str):
        return f"~{key[0]}"
    return "~".join(str(part) for part in key)


def read_cursor(text: str | None, *shape: type[int] | type[str]) -> Key | None:
    """The key a cursor of the form `shape` holds; None without one; BadCursor for text of
    another form."""
    if text is None:
        return None
    if re.fullmatch(_FORMS[shape], text) is None:
        raise BadCursor
    if shape == (str,):
        return (text[1:],)
    parts = text.split("~", len(shape) - 1)
    return tuple(kind(part) for part, kind in zip(parts, shape, strict=True))


def page_of(found: Sequence[T], limit: int, key: Callable[[T], Key]) -> tuple[list[T], str | None]:
    """The page of `found` (asked for with `limit + 1`, so one more tells there is a next
    page) and the cursor of the page after it, None on the last."""
    shown = list(found[:limit])
    if len(found) <= limit or not shown:
        return shown, None
    return shown, encode_cursor(*key(shown[-1]))
