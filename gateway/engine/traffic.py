"""Messages in and out per platform, counted in this process for /metrics.

Counted by the origin's platform string only ("telegram", "http", "schedule", …): the engine
knows no platform by name, and no count is ever keyed by a chat, a user, a session or a task.
The strings come from the adapters' code, not from users; still, a string that does not look
like a platform name, and any past the first `MAX_PLATFORMS`, count as `other`, so that a
bug upstream cannot turn a label into an unbounded (or identifying) set.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Final

from gateway.auth import NotAllowed
from gateway.engine.errors import (
    MaybeStored,
    MessageTooLong,
    QueueFull,
    QuotaExceeded,
    TooManyTasks,
)
from gateway.ids import InvalidSessionId
from gateway.store.errors import DatabaseUnavailable, OutcomeUnknown
from gateway.store.space import StorageFull
from gateway.text import UnstorableText

OTHER: Final = "other"
MAX_PLATFORMS: Final = 16
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")

# What a message taken in became: a task, a gateway command answered at once, or context kept
# without a task (group chatter the bot was not addressed in).
TASK, COMMAND, CONTEXT = "task", "command", "context"
DUPLICATE: Final = "duplicate"  # a delivery the platform repeated: kept once, counted refused
QUOTA_CODES: Final = frozenset({"session_quota", "rate_limited", "budget_exceeded"})

# What went out, by the event's kind: replies and prompts (through the outbox), errors,
# notices, and the other events a pushed platform shows (typing, stream previews, tools).
SENT_KINDS: Final = {
    "text": "reply",
    "confirm": "prompt",
    "ask_user": "prompt",
    "error": "error",
    "notice": "notice",
}
EVENT: Final = "event"

# Why a delivery failed: an outbox entry's attempt that is tried again (`retried`), one that
# ended because the platform refused it for good (`refused`) or ran past its expiry
# (`expired`), and an event or notice outside the outbox that is not tried again (`lost`).
RETRIED, REFUSED, EXPIRED, LOST = "retried", "refused", "expired", "lost"


def refusal(exc: BaseException) -> str:
    """Why the router turned a message away, as a label from a fixed set."""
    code = getattr(exc, "code", "")
    if isinstance(exc, QuotaExceeded):
        return code if code in QUOTA_CODES else "quota"
    if isinstance(exc, QueueFull):  # before TooManyTasks, which it is a kind of
        return "queue_full"
    if isinstance(exc, TooManyTasks):
        return "too_many_tasks"
    if isinstance(exc, NotAllowed):
        return "banned" if code == "banned" else "not_allowed"
    if isinstance(exc, MessageTooLong):
        return "too_long"
    if isinstance(exc, UnstorableText):
        return "unstorable"
    if isinstance(exc, InvalidSessionId):
        return "invalid"
    if isinstance(exc, StorageFull):
        return "storage_full"
    if isinstance(exc, DatabaseUnavailable | OutcomeUnknown | MaybeStored):
        return "unavailable"
    return "error"


class Traffic:
    """The counts, each keyed by (platform, what); read by the metrics at scrape time."""

    def __init__(self) -> None:
        self.received: Counter[tuple[str, str]] = Counter()  # (platform, TASK | COMMAND | CONTEXT)
        self.refused: Counter[tuple[str, str]] = Counter()  # (platform, reason)
        self.sent: Counter[tuple[str, str]] = Counter()  # (platform, SENT_KINDS value | EVENT)
        self.failed: Counter[tuple[str, str]] = Counter()  # (platform, RETRIED | … | LOST)
        self.rate_limited: Counter[str] = Counter()  # 429s the platform's API answered
        self._platforms: set[str] = set()

    def platform(self, name: str) -> str:
        """`name` as a label: itself if it looks like a platform and there is room."""
        if name in self._platforms:
            return name
        if not _NAME.fullmatch(name) or len(self._platforms) >= MAX_PLATFORMS:
            return OTHER
        self._platforms.add(name)
        return name

    def took(self, platform: str, what: str) -> None:
        if what == DUPLICATE:
            self.refused[self.platform(platform), DUPLICATE] += 1
        else:
            self.received[self.platform(platform), what] += 1

    def turned_away(self, platform: str, exc: BaseException) -> None:
        self.refused[self.platform(platform), refusal(exc)] += 1

    def delivered(self, platform: str, event_kind: str) -> None:
        self.sent[self.platform(platform), SENT_KINDS.get(event_kind, EVENT)] += 1

    def delivery_failed(self, platform: str, why: str) -> None:
        self.failed[self.platform(platform), why] += 1

    def throttled(self, platform: str) -> None:
        """The platform's API answered 429 (an adapter tells, where its client shows it)."""
        self.rate_limited[self.platform(platform)] += 1
