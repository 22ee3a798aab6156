"""Who the admins of a Telegram chat are: its creator and administrators, as the Bot API's
getChatAdministrators lists them, kept for a minute per chat (one call a minute for a busy
group, and a demotion holds within a minute)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from telegram import Bot, Message
from telegram.constants import ChatMemberStatus, ChatType
from telegram.error import TelegramError

from gateway.bans import chat_scope
from gateway.clock import Clock
from gateway.commands.registry import parse_command
from gateway.logs import get_logger

log = get_logger(__name__)

ADMINS_FRESH_SECONDS: Final = 60.0
_ADMIN_STATUSES: Final = frozenset({ChatMemberStatus.OWNER, ChatMemberStatus.ADMINISTRATOR})
# Commands that name a member, who may instead be the author of the message replied to.
_NAMING: Final = frozenset({"ban", "unban"})


class ChatAdmins:
    def __init__(self, bot: Callable[[], Bot], clock: Clock) -> None:
        self._bot = bot
        self._clock = clock
        self._known: dict[int, tuple[float, frozenset[int]]] = {}

    async def is_admin(self, chat_id: int, chat_type: str, user_id: int) -> bool:
        if chat_type not in (ChatType.GROUP, ChatType.SUPERGROUP):
            return False  # a private chat has no administrators
        return user_id in await self._admins(chat_id)

    async def of_session(self, session_id: str, user_id: str) -> bool:
        """Whether `user_id` is an admin of the group of `session_id` (`tg-<chat id>…`)."""
        chat = chat_scope(session_id).removeprefix("tg-")
        if not chat.startswith("-") or not chat[1:].isdigit() or not user_id.isdigit():
            return False  # private chats have positive ids
        return int(user_id) in await self._admins(int(chat))

    async def _admins(self, chat_id: int) -> frozenset[int]:
        now = self._clock.monotonic()
        known = self._known.get(chat_id)
        if known is not None and now - known[0] < ADMINS_FRESH_SECONDS:
            return known[1]
        try:
            members = await self._bot().get_chat_administrators(chat_id)
        except TelegramError as exc:
            # Not kept: the next message asks again rather than go a minute without admins.
            log.warning("telegram: chat admins not read", chat=chat_id, error=str(exc))
            return known[1] if known is not None else frozenset()
        admins = frozenset(m.user.id for m in members if m.status in _ADMIN_STATUSES)
        self._known[chat_id] = (now, admins)
        return admins


def naming_reply(text: str, message: Message, bot_id: int) -> str:
    """`/ban` sent as a reply to a member's message names that member: the text with their id
    after the command. Any other text as it is."""
    parsed = parse_command(text)
    replied = message.reply_to_message
    if parsed is None or parsed[0] not in _NAMING or replied is None:
        return text
    author = replied.from_user
    if author is None or author.is_bot or author.id == bot_id:
        return text
    name, args = parsed
    return f"/{name} {author.id} {args}".rstrip()
