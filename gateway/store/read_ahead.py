"""Reads made ahead of the moment they are needed, kept for that moment only.

Before each task of a session that several instances share, its owner reads the session's
journals and what history.json is compared with (gateway/store/resync.py). On PostgreSQL every
statement is a round trip, so that statement also reads where the task's context starts — the
summary, the window's fold position, the session's settings — which the task's context read,
a moment later, takes from here instead of asking again (a sixth of a message's round trips).

What is taken is what a read made at the refresh would have found: a summary folded or a
setting changed after it is seen by the next task, as one committed just after a context read
is. Writes made here drop what is held for their session (`forget`), a read is used once, only
for the window it was made for, and only within `MAX_AGE_SECONDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from gateway.clock import SYSTEM_CLOCK, Clock

T = TypeVar("T")

MAX_AGE_SECONDS: Final = 1.0
MAX_HELD: Final = 4096  # reads made and never asked for (canceled tasks) are dropped past this


@dataclass(frozen=True, slots=True)
class _Held(Generic[T]):
    window: int  # the window the read was made for
    value: T
    at: float


class ReadAhead(Generic[T]):
    """Per session, one read made ahead for a given window (event-loop use only)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, max_age: float = MAX_AGE_SECONDS) -> None:
        self._clock = clock
        self._max_age = max_age
        self._held: dict[str, _Held[T]] = {}

    def put(self, session_id: str, window: int, value: T) -> None:
        if len(self._held) >= MAX_HELD:
            self._held.clear()  # nobody asked for these: the next tasks read for themselves
        self._held[session_id] = _Held(window, value, self._clock.monotonic())

    def take(self, session_id: str, window: int) -> T | None:
        """What was read ahead for the session and this window, once; None: read it now."""
        held = self._held.pop(session_id, None)
        if held is None or held.window != window:
            return None
        if self._clock.monotonic() - held.at > self._max_age:
            return None
        return held.value

    def forget(self, session_id: str) -> None:
        self._held.pop(session_id, None)
