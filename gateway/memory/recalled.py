"""What recall hands an agent: older messages of its session, with sender and date, and how
they read in a model's context. Light on purpose (no numpy): every agent imports it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

RECALL_HEADER = (
    "Older messages of this conversation, recalled because they may bear on the new message "
    "(they are no longer in the recent window):"
)


@dataclass(frozen=True, slots=True)
class Recalled:
    message_id: int  # for a summary: the last message it covers
    kind: str  # message | summary
    role: str
    sender: str
    content: str
    send_at: int  # Unix ms
    score: float  # cosine similarity to the query


def when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC") if ms else "-"


def recalled_line(item: Recalled) -> str:
    who = "summary" if item.kind == "summary" else (item.sender or item.role)
    return f"[{when(item.send_at)}] {who}: {item.content}"


def recall_note(recalled: Sequence[Recalled]) -> str:
    """The recalled messages as one block of text for a model; "" for none."""
    if not recalled:
        return ""
    return "\n".join([RECALL_HEADER, *(recalled_line(r) for r in recalled)])


def as_json(item: Recalled) -> dict[str, object]:
    return {
        "id": item.message_id,
        "kind": item.kind,
        "role": item.role,
        "sender": item.sender,
        "content": item.content,
        "send_at": item.send_at,
        "score": round(item.score, 4),
    }
