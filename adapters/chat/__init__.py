"""What the chat platforms (Telegram, Discord) share, so each implements only its primitives.

Modules: `base` (the adapter: intake, delivery by event kind, the streamed preview),
`arrival` (a message as the platform delivered it), `indicator` (typing once a task has
worked a moment), `previews` (previews noted so a crash leaves none), `prompts` (open
prompts and their answers) and `throttle`.
"""

from __future__ import annotations

from adapters.chat.arrival import Arrival
from adapters.chat.base import ChatAdapter
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
