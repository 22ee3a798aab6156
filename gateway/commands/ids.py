"""/id on Telegram: the ids a setting needs — the chat's (`AGENVOY_TELEGRAM_ALLOWED_CHATS`),
the forum topic's, and the asker's own (`AGENVOY_ADMINS=telegram:<id>`) — which Telegram's
own apps do not show.

In a private chat with the bot anyone may ask: the chat's id is their own user id. In a group
only its administrators and the gateway admins may: a member learns nothing they need, and
the ids of a group help whoever would script against it.
"""

from __future__ import annotations

from gateway.auth import Access
from gateway.commands.registry import Command, CommandCall, CommandRegistry, CommandReply
from gateway.ids import telegram_session_id

PLATFORM = "telegram"


class IdCommands:
    def __init__(self, registry: CommandRegistry) -> None:
        self.registry = registry

    def register(self) -> None:
        self.registry.add(
            Command(
                "id",
                "this chat's id, its topic's and yours, for the settings (admins only in groups)",
                Access.anyone,  # the rule below: a private chat with the bot is no shared chat
                self.id,
                platforms=frozenset({PLATFORM}),
            )
        )

    async def id(self, call: CommandCall) -> CommandReply:
        origin = call.origin
        chat, _, topic = origin.channel_id.partition(":")
        # Telegram gives a private chat the id of the user in it.
        private = chat == origin.sender_id
        if not private and not self.registry.authority.is_admin(origin):
            return CommandReply(call.name, "only an admin may use /id in a group", ok=False)
        lines = [f"chat id: {chat}"]
        if topic:
            lines.append(f"topic id: {topic}")
        lines.append(f"your user id: {origin.sender_id}")
        if chat.lstrip("-").isdigit():
            lines.append(
                f"session: {telegram_session_id(int(chat), int(topic) if topic else None)}"
            )
        lines.append(
            f"settings: AGENVOY_TELEGRAM_ALLOWED_CHATS={chat}, "
            f"AGENVOY_ADMINS=telegram:{origin.sender_id}"
        )
        return CommandReply(call.name, "\n".join(lines))
