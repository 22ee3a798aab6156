"""What a member asked the bot to remember about them, and how it reads in a model's context.

A member's memories are theirs: they reach the agent only in a task that member asked for
(their identity, or one linked to it), in whatever chat or front-end. Light on purpose (no
SQL): every agent imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_MEMORY_CHARS = 500  # one memory: a fact or a preference, not a document
MAX_MEMORIES = 50  # kept per member; the oldest must be forgotten before more are taken


@dataclass(frozen=True, slots=True)
class MemberMemory:
    id: int
    identity: str  # the identity that asked to remember it (`telegram:41`)
    text: str
    created_at: int  # Unix ms
    asked_in: str  # the session it was asked for in (a memory outlives it)
    via: str  # "command" (/remember) or "tool" (the agent's `remember`, agreed to)


def memory_note(memories: Sequence[MemberMemory], who: str) -> str:
    """The memories as one block of text for a model; "" for none."""
    if not memories:
        return ""
    lines = [f"{who or 'The user'} asked you to remember (their own words, about themselves):"]
    lines += [f"- {m.text}" for m in memories]
    return "\n".join(lines)


def clean_memory_text(text: str) -> str:
    """The text as kept: NUL gone, whitespace folded; ValueError when empty or too long."""
    cleaned = " ".join(text.replace("\x00", "").split())
    if not cleaned:
        raise ValueError("say what to remember, e.g. /remember I prefer metric units")
    if len(cleaned) > MAX_MEMORY_CHARS:
        raise ValueError(
            f"a memory holds at most {MAX_MEMORY_CHARS} characters ({len(cleaned)} given)"
        )
    # A lone surrogate cannot be stored as UTF-8: the character it stood for is unknown.
    return cleaned.encode("utf-8", "replace").decode("utf-8")
