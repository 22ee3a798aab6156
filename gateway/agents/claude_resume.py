"""What a Claude Code CLI session has seen, so the next task sends it only what is new.

The CLI keeps a conversation on its side under a session id. After every answered task the
agent saves, per model and system prompt (`<session>/.claude_code/<model>_<hash>.json`), the
CLI session id, the fingerprints of the messages that session has seen (the window it was
given, the new message, the reply) and the last answer. A fingerprint is a short sha256 of
role, sender and content.

On the next task the conversation is the recent window plus the new message. The window slides
(it is bounded), so the saved list and the window need not start at the same message. The rule:
search the window, newest first, for a message whose fingerprint is the last saved one and at
which the two lists agree on everything they both cover (the saved list's tail against the
window up to that message). The CLI session has seen the window up to there: it is resumed
(`--resume`) and sent only the messages after that one plus the new message. Without such a
message (nothing saved, `/reset`, more messages since than the window holds, a rewritten
history) it starts fresh.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FINGERPRINT_CHARS = 16


def fingerprint(role: str, sender: str, content: str) -> str:
    # Separated by NUL so that moving text between the fields changes the fingerprint.
    data = "\0".join((role, sender, content)).encode()
    return hashlib.sha256(data).hexdigest()[:FINGERPRINT_CHARS]


def resume_point(saved: Sequence[str], window: Sequence[str]) -> int | None:
    """How many leading messages of `window` the CLI session has seen; None: start fresh.

    `saved` are the fingerprints the session has seen, oldest first; `window` those of the
    recent messages before the new one. See the module docstring for the rule.
    """
    if not saved:
        return None
    last = saved[-1]
    for end in range(len(window), 0, -1):
        if window[end - 1] != last:
            continue
        overlap = min(len(saved), end)
        if list(saved[len(saved) - overlap :]) == list(window[end - overlap : end]):
            return end
    return None


@dataclass(frozen=True)
class ResumeState:
    """The saved file: the CLI session, what it has seen, and its last answer."""

    session_id: str
    fingerprints: list[str]
    last_answer: str

    @classmethod
    def from_json(cls, state: dict[str, Any] | None) -> ResumeState | None:
        """The state a file holds; None for none, or for one that cannot be used."""
        if state is None:
            return None
        session_id, saved = state.get("session_id"), state.get("fingerprints")
        if not isinstance(session_id, str) or not session_id or not isinstance(saved, list):
            return None
        return cls(session_id, [str(f) for f in saved], str(state.get("last_answer") or ""))

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "fingerprints": self.fingerprints,
            "last_answer": self.last_answer,
        }

    def seen_of(self, window: Sequence[str]) -> int | None:
        """How many leading messages of `window` this session has seen; None: start fresh."""
        return resume_point(self.fingerprints, window)
