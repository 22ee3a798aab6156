"""What the chat platforms (Telegram, Discord) share, so each implements only its primitives.

Modules: `base` (the adapter: intake, delivery by event kind, the streamed preview),
`previews` (previews noted so a crash leaves none), `prompts` (open prompts and their
answers) and `throttle`.
"""

from __future__ import annotations

from adapters.chat.base import Arrival, ChatAdapter
from adapters.chat.prompts import ALREADY_ANSWERED, ASKED_AGAIN, Answered, Posted, Refused
from adapters.chat.throttle import Throttle

__all__ = [
    "ALREADY_ANSWERED",
    "ASKED_AGAIN",
    "Answered",
    "Arrival",
    "ChatAdapter",
    "Posted",
    "Refused",
    "Throttle",
]
