"""The chats and messages the fake knows, and the test-side builders and inspection."""

from __future__ import annotations

import copy

from ..base import JSON, RecordingServer
from .api import MIGRATED, ApiError, BotApiCall


def snapshot(message: JSON) -> JSON:
    """A copy of a message suitable for nesting as ``reply_to_message``."""
    nested = copy.deepcopy(message)
    nested.pop("reply_to_message", None)
    return nested


class TelegramState(RecordingServer[BotApiCall]):
    """What updates and Bot API methods both read and change."""

    # Set by FakeTelegram.__init__.
    token: str
    bot_user: JSON

    def __init__(self) -> None:
        super().__init__()
        self._chats: dict[int, JSON] = {}
        self._migrated: dict[int, int] = {}  # old group id -> its supergroup's id
        self._messages: dict[tuple[int, int], JSON] = {}
        self._bot_sent: list[tuple[int, int]] = []
        self._last_message_id: dict[int, int] = {}

    @property
    def base_url(self) -> str:
        """Value for ``ApplicationBuilder.base_url`` (the token is appended by the client)."""
        return f"{self.url}/bot"

    @property
    def base_file_url(self) -> str:
        """Value for ``ApplicationBuilder.base_file_url``."""
        return f"{self.url}/file/bot"

    # -- test-side builders --------------------------------------------------------------------

    def user(self, id: int, first_name: str, username: str | None = None) -> JSON:
        """A human ``User`` object."""
        user: JSON = {"id": id, "is_bot": False, "first_name": first_name}
        if username:
            user["username"] = username
        return user

    def private_chat(self, id: int, first_name: str = "Test", username: str | None = None) -> JSON:
        """A private ``Chat`` with the user ``id`` (positive)."""
        if id <= 0:
            raise ValueError("a private chat id is the user's id and must be positive")
        chat: JSON = {"id": id, "type": "private", "first_name": first_name}
        if username:
            chat["username"] = username
        return self._remember_chat(chat)

    def group(self, id: int, title: str) -> JSON:
        """A basic group ``Chat`` (negative id)."""
        if id >= 0:
            raise ValueError("group chat ids are negative")
        return self._remember_chat({"id": id, "type": "group", "title": title})

    def supergroup(self, id: int, title: str, is_forum: bool = False) -> JSON:
        """A supergroup ``Chat`` (negative id, usually ``-100...``), optionally a forum."""
        if id >= 0:
            raise ValueError("supergroup chat ids are negative")
        chat: JSON = {"id": id, "type": "supergroup", "title": title}
        if is_forum:
            chat["is_forum"] = True
        return self._remember_chat(chat)

    # -- test-side inspection ------------------------------------------------------------------

    def sent_messages(self, chat_id: int | None = None) -> list[JSON]:
        """Messages the bot sent (oldest first), in their latest state; deleted ones left out."""
        result = []
        for key in self._bot_sent:
            message = self._messages.get(key)
            if message is not None and (chat_id is None or key[0] == chat_id):
                result.append(copy.deepcopy(message))
        return result

    def message(self, chat_id: int, message_id: int) -> JSON | None:
        """The stored state of any message (injected or sent), or None if unknown or deleted."""
        message = self._messages.get((chat_id, message_id))
        return copy.deepcopy(message) if message is not None else None

    @property
    def calls(self) -> list[tuple[str, JSON]]:
        """``(method, params)`` of every recorded call, in order."""
        return [(record.method, record.data) for record in self.call_log]

    # -- internals -----------------------------------------------------------------------------

    def _remember_chat(self, chat: JSON) -> JSON:
        chat_id = int(chat["id"])
        self._chats[chat_id] = copy.deepcopy(chat)
        return copy.deepcopy(chat)

    def _resolve_chat(self, params: JSON) -> JSON:
        chat_id = params.get("chat_id")
        if chat_id is None or chat_id == "":
            raise ApiError(400, "Bad Request: chat_id is empty")
        if isinstance(chat_id, str):
            wanted = chat_id.lower().removeprefix("@")
            for candidate in self._chats.values():
                if str(candidate.get("username", "")).lower() == wanted:
                    return candidate
            raise ApiError(400, "Bad Request: chat not found")
        if chat_id in self._migrated:
            raise ApiError(400, MIGRATED, {"migrate_to_chat_id": self._migrated[chat_id]})
        known = self._chats.get(chat_id)
        if known is not None:
            return known
        # Unknown numeric ids get a plausible chat, so tests need not declare every chat.
        if chat_id > 0:
            chat = {"id": chat_id, "type": "private", "first_name": f"User {chat_id}"}
        elif str(chat_id).startswith("-100"):
            chat = {"id": chat_id, "type": "supergroup", "title": f"Chat {chat_id}"}
        else:
            chat = {"id": chat_id, "type": "group", "title": f"Chat {chat_id}"}
        self._chats[chat_id] = chat
        return chat

    def _as_message(self, value: JSON) -> JSON:
        if "update_id" in value:
            inner = value.get("message") or value.get("edited_message")
            if inner is None and "callback_query" in value:
                inner = value["callback_query"].get("message")
            if not isinstance(inner, dict):
                raise ValueError("the update holds no message")
            return inner
        if "message_id" not in value or "chat" not in value:
            raise ValueError("not a message: needs message_id and chat")
        return value

    def _find_message(self, chat_id: int, ref: JSON | int) -> JSON:
        if isinstance(ref, int):
            message = self._messages.get((chat_id, ref))
            if message is None:
                raise ValueError(f"no message {ref} in chat {chat_id}")
            return message
        message = self._as_message(ref)
        key = (int(message["chat"]["id"]), int(message["message_id"]))
        return self._messages.get(key, message)
