"""The Bot API methods: sending, editing and deleting messages, callback answers, chat
actions, the command list and getChat."""

from __future__ import annotations

import copy
import json
import re
import time
from typing import Any

from ..base import JSON, Upload
from .api import INT_RE, ApiError
from .entities import HtmlParseError, parse_html, utf16_len
from .files import StoredFile, photo_size
from .state import snapshot
from .updates import TelegramUpdates

MAX_MESSAGE_LENGTH = 4096
MAX_CAPTION_LENGTH = 1024
MAX_CALLBACK_DATA_BYTES = 64

_CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)
_COMMAND_RE = re.compile(r"[a-z0-9_]{1,32}")
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)
_BAD_QUERY = "Bad Request: query is too old and response timeout expired or query ID is invalid"


class TelegramMethods(TelegramUpdates):
    """Each method takes the decoded params and returns the ``result`` or raises ApiError."""

    def __init__(self) -> None:
        super().__init__()
        self.callback_answers: list[JSON] = []
        self._answered_queries: set[str] = set()
        self._commands: dict[tuple[str, str], list[JSON]] = {}

    # -- test side -----------------------------------------------------------------------------

    def my_commands(self, scope: JSON | None = None, language_code: str = "") -> list[JSON]:
        """The command list stored by ``setMyCommands`` for a scope and language."""
        return copy.deepcopy(self._commands.get(self._commands_key(scope, language_code), []))

    # -- Bot API methods -----------------------------------------------------------------------

    async def _true(self, params: JSON) -> bool:
        return True

    async def _get_me(self, params: JSON) -> JSON:
        return {
            **self.bot_user,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _send_message(self, params: JSON) -> JSON:
        chat = self._resolve_chat(params)
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        text, entities = self._formatted(text, params.get("parse_mode"), params.get("entities"))
        if not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > MAX_MESSAGE_LENGTH:
            raise ApiError(400, "Bad Request: message is too long")
        content: JSON = {"text": text}
        if entities:
            content["entities"] = entities
        return self._store_bot_message(chat, params, content)

    async def _send_document(self, params: JSON) -> JSON:
        return await self._send_file(params, "document")

    async def _send_photo(self, params: JSON) -> JSON:
        return await self._send_file(params, "photo")

    async def _send_file(self, params: JSON, kind: str) -> JSON:
        chat = self._resolve_chat(params)
        value = params.get(kind)
        files: list[StoredFile] = []
        if isinstance(value, Upload):
            name = value.filename or kind
            stored = self._new_file(value.data, f"{kind}s/{name}")
            files.append(stored)
        elif isinstance(value, str) and value in self._files:
            stored = self._files[value]
            name = stored.file_path.rsplit("/", 1)[-1]
        elif isinstance(value, str) and value.startswith(("http://", "https://")):
            name = value.rstrip("/").rsplit("/", 1)[-1] or kind
            stored = self._new_file(b"", f"{kind}s/{name}")
            files.append(stored)
        elif value is None or value == "":
            raise ApiError(400, f"Bad Request: there is no {kind} in the request")
        else:
            raise ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        content: JSON = {}
        if kind == "document":
            document: JSON = {
                "file_id": stored.file_id,
                "file_unique_id": stored.file_unique_id,
                "file_name": name,
                "file_size": len(stored.data),
            }
            if isinstance(value, Upload) and value.content_type:
                document["mime_type"] = value.content_type
            content["document"] = document
        else:
            content["photo"] = [photo_size(stored)]
        caption = params.get("caption")
        if isinstance(caption, str) and caption:
            caption, entities = self._formatted(
                caption, params.get("parse_mode"), params.get("caption_entities")
            )
            if utf16_len(caption) > MAX_CAPTION_LENGTH:
                raise ApiError(400, "Bad Request: message caption is too long")
            content["caption"] = caption
            if entities:
                content["caption_entities"] = entities
        for new in files:
            self._store_file(new)
        return self._store_bot_message(chat, params, content)

    async def _edit_message_text(self, params: JSON) -> JSON | bool:
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        text, entities = self._formatted(text, params.get("parse_mode"), params.get("entities"))
        if utf16_len(text) > MAX_MESSAGE_LENGTH:
            raise ApiError(400, "Bad Request: message is too long")
        markup = self._inline_markup(params)
        if params.get("inline_message_id"):
            return True
        message = self._editable_message(params)
        if "text" not in message:
            raise ApiError(400, "Bad Request: there is no text in the message to edit")
        if (
            message["text"] == text
            and message.get("entities", []) == entities
            and message.get("reply_markup") == markup
        ):
            raise ApiError(400, _NOT_MODIFIED)
        message["text"] = text
        self._set_optional(message, "entities", entities or None)
        self._set_optional(message, "reply_markup", markup)
        message["edit_date"] = int(time.time())
        return copy.deepcopy(message)

    async def _edit_message_reply_markup(self, params: JSON) -> JSON | bool:
        markup = self._inline_markup(params)
        if params.get("inline_message_id"):
            return True
        message = self._editable_message(params)
        if message.get("reply_markup") == markup:
            raise ApiError(400, _NOT_MODIFIED)
        self._set_optional(message, "reply_markup", markup)
        message["edit_date"] = int(time.time())
        return copy.deepcopy(message)

    async def _delete_message(self, params: JSON) -> bool:
        chat = self._resolve_chat(params)
        key = (int(chat["id"]), int(params.get("message_id", 0)))
        if self._messages.pop(key, None) is None:
            raise ApiError(400, "Bad Request: message to delete not found")
        return True

    async def _answer_callback_query(self, params: JSON) -> bool:
        query_id = str(params.get("callback_query_id", ""))
        if query_id not in self._issued_queries or query_id in self._answered_queries:
            raise ApiError(400, _BAD_QUERY)
        if len(str(params.get("text", ""))) > 200:
            raise ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        self._answered_queries.add(query_id)
        self.callback_answers.append(
            {
                "callback_query_id": query_id,
                "text": params.get("text"),
                "show_alert": bool(params.get("show_alert", False)),
                "url": params.get("url"),
                "cache_time": params.get("cache_time"),
            }
        )
        return True

    async def _send_chat_action(self, params: JSON) -> bool:
        self._resolve_chat(params)
        if params.get("action") not in _CHAT_ACTIONS:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _set_my_commands(self, params: JSON) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list):
            raise ApiError(400, "Bad Request: can't parse commands JSON object")
        if len(commands) > 100:
            raise ApiError(400, "Bad Request: too many commands specified")
        stored: list[JSON] = []
        for command in commands:
            name = command.get("command") if isinstance(command, dict) else None
            description = command.get("description") if isinstance(command, dict) else None
            if not isinstance(name, str) or not _COMMAND_RE.fullmatch(name):
                raise ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not isinstance(description, str) or not 1 <= len(description) <= 256:
                raise ApiError(400, "Bad Request: command description is invalid")
            stored.append({"command": name, "description": description})
        key = self._commands_key(params.get("scope"), params.get("language_code", ""))
        self._commands[key] = stored
        return True

    async def _get_my_commands(self, params: JSON) -> list[JSON]:
        key = self._commands_key(params.get("scope"), params.get("language_code", ""))
        return copy.deepcopy(self._commands.get(key, []))

    async def _delete_my_commands(self, params: JSON) -> bool:
        key = self._commands_key(params.get("scope"), params.get("language_code", ""))
        self._commands.pop(key, None)
        return True

    async def _get_chat(self, params: JSON) -> JSON:
        chat = self._resolve_chat(params)
        return {
            **chat,
            "accent_color_id": 0,
            "max_reaction_count": 11,
            "accepted_gift_types": {
                "unlimited_gifts": False,
                "limited_gifts": False,
                "unique_gifts": False,
                "premium_subscription": False,
                "gifts_from_channels": False,
            },
        }

    # -- internals -----------------------------------------------------------------------------

    def _formatted(self, text: str, parse_mode: Any, entities: Any) -> tuple[str, list[JSON]]:
        if isinstance(parse_mode, str) and parse_mode.lower() == "html":
            try:
                return parse_html(text)
            except HtmlParseError as exc:
                raise ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        if entities is None:
            return text, []
        if not isinstance(entities, list) or not all(
            isinstance(e, dict) and isinstance(e.get("offset"), int) and e.get("type")
            for e in entities
        ):
            raise ApiError(400, "Bad Request: can't parse entities JSON object")
        return text, entities

    def _inline_markup(self, params: JSON) -> JSON | None:
        markup = params.get("reply_markup")
        if not isinstance(markup, dict) or "inline_keyboard" not in markup:
            return None
        rows = markup["inline_keyboard"]
        if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
            raise ApiError(400, "Bad Request: can't parse inline keyboard button")
        for row in rows:
            for button in row:
                if not isinstance(button, dict) or not button.get("text"):
                    raise ApiError(400, "Bad Request: can't parse inline keyboard button")
                data = button.get("callback_data")
                if data is not None and not (
                    0 < len(str(data).encode("utf-8")) <= MAX_CALLBACK_DATA_BYTES
                ):
                    raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
        return copy.deepcopy(markup)

    def _store_bot_message(self, chat: JSON, params: JSON, content: JSON) -> JSON:
        chat_id = int(chat["id"])
        reply = self._reply_target(chat_id, params)
        message: JSON = {
            "message_id": self._last_message_id.get(chat_id, 0) + 1,
            "from": dict(self.bot_user),
            "chat": copy.deepcopy(chat),
            "date": int(time.time()),
        }
        thread_id = params.get("message_thread_id")
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            if chat.get("is_forum"):
                message["is_topic_message"] = True
        if reply is not None:
            message["reply_to_message"] = snapshot(reply)
        message.update(content)
        markup = self._inline_markup(params)
        if markup is not None:
            message["reply_markup"] = markup
        self._last_message_id[chat_id] = message["message_id"]
        key = (chat_id, message["message_id"])
        self._messages[key] = message
        self._bot_sent.append(key)
        return copy.deepcopy(message)

    def _reply_target(self, chat_id: int, params: JSON) -> JSON | None:
        reply = params.get("reply_parameters")
        if isinstance(reply, dict) and "message_id" in reply:
            target_chat = reply.get("chat_id", chat_id)
            message_id = int(reply["message_id"])
            allow_missing = bool(reply.get("allow_sending_without_reply"))
        elif params.get("reply_to_message_id") is not None:
            target_chat = chat_id
            message_id = int(params["reply_to_message_id"])
            allow_missing = bool(params.get("allow_sending_without_reply"))
        else:
            return None
        if isinstance(target_chat, str) and INT_RE.fullmatch(target_chat):
            target_chat = int(target_chat)
        message = (
            self._messages.get((target_chat, message_id)) if isinstance(target_chat, int) else None
        )
        if message is None and not allow_missing:
            raise ApiError(400, "Bad Request: message to be replied not found")
        return message

    def _editable_message(self, params: JSON) -> JSON:
        chat = self._resolve_chat(params)
        if params.get("message_id") is None:
            raise ApiError(400, "Bad Request: message identifier is not specified")
        message = self._messages.get((int(chat["id"]), int(params["message_id"])))
        if message is None:
            raise ApiError(400, "Bad Request: message to edit not found")
        if message.get("from", {}).get("id") != self.bot_user["id"]:
            raise ApiError(400, "Bad Request: message can't be edited")
        return message

    @staticmethod
    def _set_optional(target: JSON, key: str, value: Any) -> None:
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value

    @staticmethod
    def _commands_key(scope: Any, language_code: Any) -> tuple[str, str]:
        scope = scope if isinstance(scope, dict) else {"type": "default"}
        return json.dumps(scope, sort_keys=True), str(language_code or "")
