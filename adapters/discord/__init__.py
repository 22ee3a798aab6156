"""The Discord front-end, on discord.py: every channel is one permanent `dc-*` session.

- A thread is a channel of its own, and a DM channel too, so DMs are per user.
- The agent answers mentions of the bot (the mention is taken out of the text), replies to
  its messages, everything in the listen channels, and DMs when they are allowed (they are
  not by default); other messages in allowed channels are kept as context. It never answers
  itself or another bot. Messages, slash commands, button presses and modal submits pass one
  check (`allowlist`): from outside the allowed
  guilds and channels they are not served, DMs only when allowed. A message carries its id,
  so one delivered twice is stored once.
- A slash command is taken in as the message `/name args` would be (same order, sender and
  delivery id: one delivered twice runs once); its reply is the interaction's response.
- Replies are split at 2,000 characters without breaking code blocks, reply to the trigger,
  and mention nobody (no @everyone, @here, roles or users; the reply to the trigger pings
  its author only). What the bot says itself (prompts, notices, command replies) shows the
  names, arguments and answers in it as typed, Markdown escaped. Each message carries a
  nonce derived from the outbox entry with `enforce_nonce`, so a retried send cannot post
  twice.
- Prompts are buttons whose custom ids carry the task hash; they are registered again at
  start-up (dynamic items), so a button pressed after a restart still works. Only the
  requester or an admin may press them; anyone else gets an ephemeral refusal.

Modules: `adapter` (what the bot answers, prompts, sending), `allowlist` (where it serves),
`client` (the discord.py client and its buttons), `connect` (connecting, tried again while
Discord is unreachable), `invite` (the link that adds the bot to a server), `commands` (slash
commands from the registry), `prompts` (the bot's own text, escaped) and `split` (cutting
replies to Discord's limit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adapters.discord.adapter import DiscordAdapter
    from gateway.runtime import Runtime

__all__ = ["create"]


def create(runtime: Runtime, *, token: str | None = None) -> DiscordAdapter:
    """The adapter, with `token` (a live connection's) or the environment's."""
    # Imported here: discord.py is loaded only by a gateway that connects to Discord, not by
    # the package's other users (the console's invite link).
    from adapters.discord.adapter import DiscordAdapter

    return DiscordAdapter(runtime, token=token)
