"""A message as a chat platform delivered it, read before anything is awaited for it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from adapters.attachments import Download
from adapters.chat.prompts import Posted
from gateway.events import Origin


@dataclass(frozen=True, slots=True)
class Arrival:
    """A message as read from the platform's event, before anything is awaited for it."""

    origin: Origin
    session_id: str
    text: str
    addressed: bool  # for the agent; otherwise kept as context
    downloads: Sequence[Download] = ()
    replied_to: Posted | None = None  # the bot's message this one is a reply to
    source_key: str = ""  # the platform's id of this delivery (Inbound.source_key)
    # Where a refusal of the text is said (a slash command: in its interaction's response, to
    # the one who asked alone); None: a reply in the chat.
    refuse: Callable[[str], Awaitable[None]] | None = None
