"""Walking the session's input history with Up and Down, like a shell."""

from __future__ import annotations

from collections.abc import Sequence


class InputHistory:
    """The entries of `.cmd_history` (oldest first) and a cursor into them.

    The cursor sits past the newest entry while the user types; walking away from there keeps
    what was typed as a draft, so walking back down returns it.
    """

    def __init__(self, entries: Sequence[str] = ()) -> None:
        self.entries = list(entries)
        self._index = len(self.entries)
        self._draft = ""

    def reset(self, entries: Sequence[str]) -> None:
        self.entries = list(entries)
        self._index = len(self.entries)
        self._draft = ""

    def previous(self, current: str) -> str | None:
        """The entry before the cursor, or None at the oldest one."""
        if self._index == 0:
            return None
        if self._index == len(self.entries):
            self._draft = current
        self._index -= 1
        return self.entries[self._index]

    def next(self) -> str | None:
        """The entry after the cursor, the draft past the newest, or None when already there."""
        if self._index >= len(self.entries):
            return None
        self._index += 1
        if self._index == len(self.entries):
            return self._draft
        return self.entries[self._index]
