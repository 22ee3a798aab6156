"""Whether the caller of a request still holds the credential it came with.

A stream or a long wait outlives the check made when its request came in; it asks again when
the issued tokens change (`Credentials.changed`) and about once a second besides, so a revoked
token's streams and waits end within a second. The middleware that identifies a request
leaves its `Standing` in a context variable, which the request's handler runs under.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

# How often an open stream or wait asks, when nothing announces a change.
CHECK_SECONDS: Final = 1.0
REVOKED: Final = "the credential this request came with is no longer valid"


@dataclass(frozen=True, slots=True)
class Standing:
    holds: Callable[[], Awaitable[bool]]  # whether the credential still stands for the caller
    changed: Callable[[], asyncio.Future[None]]  # done at the next change of the credentials


STANDING: Final[ContextVar[Standing | None]] = ContextVar("agenvoy_standing", default=None)


def current() -> Standing | None:
    """The standing of the request being handled, if it was identified."""
    return STANDING.get()
