"""The Telegram front-end, on python-telegram-bot: every chat is one shared `tg-*` session.

- A private chat: every message goes to the agent. A group: messages that mention the bot,
  reply to one of its messages, or are commands go to the agent; the rest is kept as context
  (stored with who said it) without starting a task.
- A forum topic is a session of its own (`tg-<chat>_<topic>`); replies, typing and prompts go
  to the topic a message came from. The General topic is the chat's own session.
- Replies are rendered as Telegram HTML and split at 4,096 UTF-16 units; when Telegram rejects
  the markup the chunk is sent again as plain text, so a reply is never dropped.
- Confirmations are inline keyboards (Approve / Deny), questions with options too; a free-text
  question is a ForceReply addressed to the requester. Only the requester or an admin may
  answer; anyone else is told who can.

- Updates come by long polling (`polling`) or a webhook (`webhook`), and each is confirmed to
  Telegram only once it is handled: stored, or refused by the allow-list, which every update
  meets first. Every message carries its update id, so one delivered twice is stored once.

Modules: `adapter` (the application and its handlers), `connect` (connecting, tried again
while Telegram is unreachable), `polling` and `webhook` (where updates
come from), `incoming` (reading a message), `place` (chats, topics, migrated groups), `sender`
(sending), `prompts` (keyboards), `render` (Markdown to HTML) and `split` (cutting to
Telegram's limit).
"""

from __future__ import annotations

from adapters.telegram.adapter import TelegramAdapter
from gateway.runtime import Runtime

__all__ = ["TelegramAdapter", "create"]


def create(runtime: Runtime, *, token: str | None = None) -> TelegramAdapter:
    """The adapter, with `token` (a live connection's) or the environment's."""
    return TelegramAdapter.build(runtime, token=token)
