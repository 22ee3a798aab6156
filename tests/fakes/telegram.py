"""A fake Telegram Bot API server for tests that drive the real python-telegram-bot client.

Point the client at it with::

    async with FakeTelegram() as fake:
        app = (
            ApplicationBuilder()
            .token(fake.token)
            .base_url(fake.base_url)
            .base_file_url(fake.base_file_url)
            .build()
        )

The server listens on 127.0.0.1 on a free port. It keeps just enough state for a bot to poll
for updates, send, edit and delete messages, answer callback queries, manage its command list,
upload and download files, and use a webhook. Tests feed it updates with the ``inject_*``
helpers and inspect what the bot did through ``calls``, ``sent_messages()`` and
``wait_for_call()``.

Not simulated: privacy mode in groups (every injected update is delivered), rate limits
(inject them with ``fail_next``), Markdown parse modes (text is stored as sent) and most
methods not listed in ``FakeTelegram._methods``: those answer 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from telegram import Update

from .base import (
    DEFAULT_TIMEOUT,
    JSON,
    BodyPredicate,
    CallRecord,
    RecordingServer,
    Upload,
)

DEFAULT_TOKEN = "123456:TEST-TOKEN"
MAX_MESSAGE_LENGTH = 4096
MAX_CAPTION_LENGTH = 1024
MAX_CALLBACK_DATA_BYTES = 64
MAX_UPLOAD_BYTES = 50 * 1024 * 1024

# Form fields whose value is JSON-encoded by the client.
_JSON_FIELDS = frozenset(
    {
        "allowed_updates",
        "caption_entities",
        "commands",
        "entities",
        "link_preview_options",
        "media",
        "message_ids",
        "permissions",
        "reaction",
        "reply_markup",
        "reply_parameters",
        "scope",
    }
)
_INT_FIELDS = frozenset(
    {
        "cache_time",
        "duration",
        "height",
        "limit",
        "max_connections",
        "message_id",
        "message_thread_id",
        "offset",
        "reply_to_message_id",
        "timeout",
        "user_id",
        "width",
    }
)
_CHAT_ID_FIELDS = frozenset({"chat_id", "from_chat_id"})
_BOOL_FIELDS = frozenset(
    {
        "allow_paid_broadcast",
        "allow_sending_without_reply",
        "disable_content_type_detection",
        "disable_notification",
        "disable_web_page_preview",
        "drop_pending_updates",
        "has_spoiler",
        "protect_content",
        "show_alert",
        "show_caption_above_media",
    }
)
_INT_RE = re.compile(r"-?\d+")

# Update kinds the Bot API leaves out unless they are listed in allowed_updates.
_OPT_IN_UPDATES = frozenset({"chat_member", "message_reaction", "message_reaction_count"})

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
_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")
_BOT_COMMAND_RE = re.compile(r"/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?")
_MENTION_RE = re.compile(r"(?<![\w@/])@[A-Za-z0-9_]{5,32}\b")

_DEFAULT_DESCRIPTIONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
}
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)
_BAD_QUERY = "Bad Request: query is too old and response timeout expired or query ID is invalid"
_GETUPDATES_WITH_WEBHOOK = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
_GETUPDATES_TERMINATED = (
    "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running"
)
_MIGRATED = "Bad Request: group chat was upgraded to a supergroup chat"


class ApiError(Exception):
    """An error answer of the Bot API: HTTP status, description and optional parameters."""

    def __init__(self, status: int, description: str, parameters: JSON | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters or {}


class BotApiCall(CallRecord):
    """One Bot API request; its route is the method name as the fake spells it."""

    @property
    def method(self) -> str:
        return self.route

    @property
    def description(self) -> str:
        """The error's description, ``""`` for a successful call."""
        return str(self.response.get("description", "")) if self.response else ""


@dataclass
class _StoredFile:
    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units, the unit Telegram counts in."""
    return len(text.encode("utf-16-le")) // 2


# ---------------------------------------------------------------------------------------------
# HTML parse mode


class HtmlParseError(ValueError):
    """Raised for HTML that the Bot API would reject."""


_HTML_ENTITY_TYPES = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "blockquote": "blockquote",
}
_TAG_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
_ATTR_NAME_RE = re.compile(r"[A-Za-z_:][-A-Za-z0-9_:.]*")
_CHAR_REF_RE = re.compile(r"&(lt|gt|amp|quot|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")
_NAMED_REFS = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}


@dataclass
class _OpenTag:
    name: str
    offset: int
    attrs: dict[str, str]
    language: str | None = None


def _byte_offset(source: str, index: int) -> int:
    return len(source[:index].encode("utf-8"))


def _decode_char_ref(ref: str) -> str:
    if ref in _NAMED_REFS:
        return _NAMED_REFS[ref]
    code = int(ref[2:], 16) if ref[1] in "xX" else int(ref[1:])
    if not 0 < code <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    return chr(code)


def _unescape(value: str) -> str:
    return _CHAR_REF_RE.sub(lambda m: _decode_char_ref(m.group(1)), value)


def parse_html(source: str) -> tuple[str, list[JSON]]:
    """Parse Telegram-flavoured HTML into plain text and message entities.

    Accepts only the tags the Bot API documents for ``parse_mode="HTML"`` and raises
    :class:`HtmlParseError` with a Bot API style message for anything else: unknown or void
    tags such as ``<br>``, a bare ``<``, unclosed or mismatched tags.
    """
    out: list[str] = []
    length = 0  # UTF-16 length of the text produced so far
    stack: list[_OpenTag] = []
    entities: list[JSON] = []
    i = 0
    n = len(source)

    def emit(text: str) -> None:
        nonlocal length
        out.append(text)
        length += utf16_len(text)

    while i < n:
        ch = source[i]
        if ch == "&":
            ref = _CHAR_REF_RE.match(source, i)
            if ref:
                emit(_decode_char_ref(ref.group(1)))
                i = ref.end()
            else:
                emit(ch)
                i += 1
            continue
        if ch != "<":
            emit(ch)
            i += 1
            continue
        if source.startswith("</", i):
            end = source.find(">", i)
            if end < 0:
                raise HtmlParseError(f"Unclosed end tag at byte offset {_byte_offset(source, i)}")
            name = source[i + 2 : end].strip().lower()
            if not stack:
                raise HtmlParseError(
                    f'Unexpected end tag "{name}" at byte offset {_byte_offset(source, i)}'
                )
            tag = stack.pop()
            if name != tag.name:
                raise HtmlParseError(
                    f"Unmatched end tag at byte offset {_byte_offset(source, i)}, "
                    f'expected "</{tag.name}>", found "</{name}>"'
                )
            _close_tag(tag, length, stack, entities)
            i = end + 1
            continue
        match = _TAG_NAME_RE.match(source, i + 1)
        name = match.group(0).lower() if match else ""
        if name not in _HTML_ENTITY_TYPES:
            raise HtmlParseError(
                f'Unsupported start tag "{name}" at byte offset {_byte_offset(source, i)}'
            )
        assert match is not None
        attrs, i = _parse_attributes(source, match.end(), name, tag_start=i)
        if name == "span" and attrs.get("class") != "tg-spoiler":
            raise HtmlParseError('Tag "span" must have class "tg-spoiler"')
        stack.append(_OpenTag(name, length, attrs))
    if stack:
        raise HtmlParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1].name}"')
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return "".join(out), entities


def _parse_attributes(
    source: str, j: int, name: str, *, tag_start: int
) -> tuple[dict[str, str], int]:
    attrs: dict[str, str] = {}
    n = len(source)
    while True:
        while j < n and source[j].isspace():
            j += 1
        if j >= n:
            raise HtmlParseError(
                f"Unclosed start tag at byte offset {_byte_offset(source, tag_start)}"
            )
        if source[j] == ">":
            return attrs, j + 1
        attr = _ATTR_NAME_RE.match(source, j)
        if not attr:
            raise HtmlParseError(
                f'Unexpected character in the tag "{name}" at byte offset {_byte_offset(source, j)}'
            )
        attr_name = attr.group(0).lower()
        j = attr.end()
        while j < n and source[j].isspace():
            j += 1
        value = ""
        if j < n and source[j] == "=":
            j += 1
            while j < n and source[j].isspace():
                j += 1
            if j < n and source[j] in "\"'":
                quote = source[j]
                end = source.find(quote, j + 1)
                if end < 0:
                    raise HtmlParseError(
                        "Unclosed end of an attribute value at byte offset "
                        f"{_byte_offset(source, j)}"
                    )
                value = source[j + 1 : end]
                j = end + 1
            else:
                start = j
                while j < n and not source[j].isspace() and source[j] != ">":
                    j += 1
                value = source[start:j]
        attrs[attr_name] = _unescape(value)


def _close_tag(tag: _OpenTag, end: int, stack: list[_OpenTag], entities: list[JSON]) -> None:
    parent = stack[-1] if stack else None
    if tag.name == "code" and parent is not None and parent.name == "pre":
        cls = tag.attrs.get("class", "")
        if cls.startswith("language-"):
            parent.language = cls.removeprefix("language-")
        return
    size = end - tag.offset
    if size <= 0:
        return
    kind = _HTML_ENTITY_TYPES[tag.name]
    entity: JSON = {"type": kind, "offset": tag.offset, "length": size}
    if kind == "text_link":
        href = tag.attrs.get("href")
        if not href:
            return
        entity["url"] = href
    elif kind == "pre" and tag.language:
        entity["language"] = tag.language
    elif kind == "blockquote" and "expandable" in tag.attrs:
        entity["type"] = "expandable_blockquote"
    entities.append(entity)


# ---------------------------------------------------------------------------------------------
# Request decoding


def _decode_params(raw: dict[str, Any]) -> JSON:
    params: JSON = {}
    for name, value in raw.items():
        if isinstance(value, web.FileField):
            params[name] = Upload(name, value.filename, value.content_type, value.file.read())
        elif not isinstance(value, str):
            params[name] = value
        elif name in _JSON_FIELDS:
            try:
                params[name] = json.loads(value)
            except ValueError:
                raise ApiError(400, f"Bad Request: can't parse {name} JSON object") from None
        elif name in _CHAT_ID_FIELDS:
            params[name] = int(value) if _INT_RE.fullmatch(value) else value
        elif name in _INT_FIELDS:
            if not _INT_RE.fullmatch(value.strip()):
                raise ApiError(400, f"Bad Request: invalid {name} specified")
            params[name] = int(value)
        elif name in _BOOL_FIELDS:
            params[name] = value.strip().lower() in ("true", "1")
        else:
            params[name] = value
    return params


def _error_body(status: int, description: str, parameters: JSON | None = None) -> JSON:
    body: JSON = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return body


def _error_response(status: int, description: str, parameters: JSON | None = None) -> web.Response:
    return web.json_response(_error_body(status, description, parameters), status=status)


def _update_kind(update: JSON) -> str:
    return next((key for key in update if key != "update_id"), "")


def _snapshot(message: JSON) -> JSON:
    """A copy of a message suitable for nesting as ``reply_to_message``."""
    nested = copy.deepcopy(message)
    nested.pop("reply_to_message", None)
    return nested


Handler = Callable[[JSON], Awaitable[Any]]


class FakeTelegram(RecordingServer[BotApiCall]):
    """A fake Telegram Bot API on ``127.0.0.1``; see the module docstring."""

    _unlisted_routes = frozenset({"getUpdates"})

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        bot_username: str = "agenvoy_test_bot",
        bot_first_name: str = "Agenvoy Test Bot",
    ) -> None:
        super().__init__()
        self.token = token
        bot_id = int(token.split(":", 1)[0]) if _INT_RE.fullmatch(token.split(":", 1)[0]) else 1
        self.bot_user: JSON = {
            "id": bot_id,
            "is_bot": True,
            "first_name": bot_first_name,
            "username": bot_username,
        }
        self.uploads: list[Upload] = []
        self.callback_answers: list[JSON] = []
        self.webhook_deliveries: list[JSON] = []
        self._pending: list[JSON] = []
        self._update_ids = itertools.count(1)
        self._callback_ids = itertools.count(4_000_000_000_001)
        self._file_ids = itertools.count(1)
        self._issued_queries: set[str] = set()
        self._answered_queries: set[str] = set()
        self._allowed_updates: list[str] | None = None
        self._chats: dict[int, JSON] = {}
        self._migrated: dict[int, int] = {}
        self._messages: dict[tuple[int, int], JSON] = {}
        self._bot_sent: list[tuple[int, int]] = []
        self._last_message_id: dict[int, int] = {}
        self._commands: dict[tuple[str, str], list[JSON]] = {}
        self._files: dict[str, _StoredFile] = {}
        self._files_by_path: dict[str, _StoredFile] = {}
        self._webhook: JSON | None = None
        self._poll_generation = 0
        self._waiting_polls = 0
        self._closing = False
        self._session: aiohttp.ClientSession | None = None
        self._methods: dict[str, tuple[str, Handler]] = {
            name.lower(): (name, handler)
            for name, handler in {
                "getMe": self._get_me,
                "logOut": self._true,
                "close": self._true,
                "getUpdates": self._get_updates,
                "setWebhook": self._set_webhook,
                "deleteWebhook": self._delete_webhook,
                "getWebhookInfo": self._get_webhook_info,
                "sendMessage": self._send_message,
                "editMessageText": self._edit_message_text,
                "editMessageReplyMarkup": self._edit_message_reply_markup,
                "deleteMessage": self._delete_message,
                "answerCallbackQuery": self._answer_callback_query,
                "sendChatAction": self._send_chat_action,
                "setMyCommands": self._set_my_commands,
                "getMyCommands": self._get_my_commands,
                "deleteMyCommands": self._delete_my_commands,
                "getFile": self._get_file,
                "sendDocument": self._send_document,
                "sendPhoto": self._send_photo,
                "getChat": self._get_chat,
            }.items()
        }

    # -- lifecycle -----------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_UPLOAD_BYTES)
        app.router.add_route("*", "/bot{token}/{method}", self._handle_api)
        app.router.add_get("/file/bot{token}/{file_path:.+}", self._handle_download)
        return app

    async def _started(self) -> None:
        self._closing = False
        self._session = aiohttp.ClientSession()
        self._spawn(self._deliver_webhooks())

    async def _stopping(self) -> None:
        # Pending long-polls return at once instead of holding up the runner's cleanup.
        self._closing = True
        await self._notify()

    async def stop(self) -> None:
        await super().stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``; only valid after :meth:`start`."""
        return f"http://127.0.0.1:{self.port}"

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

    # -- test-side injection -------------------------------------------------------------------

    def inject_message(
        self,
        chat: JSON,
        user: JSON,
        text: str = "",
        *,
        reply_to: JSON | int | None = None,
        thread_id: int | None = None,
        entities: list[JSON] | None = None,
        document: JSON | tuple[str, bytes] | tuple[str, bytes, str] | None = None,
        photo: bytes | list[JSON] | None = None,
        voice: bytes | None = None,
        migrate_to_chat_id: int | None = None,
    ) -> JSON:
        """Queue a ``message`` update from ``user`` in ``chat`` and return the update.

        ``text`` becomes the caption when a document or photo is attached. Unless ``entities``
        is given, a ``bot_command`` entity is added for a leading ``/command`` and a ``mention``
        entity for every ``@username``. ``reply_to`` is a message (or update) dict or a
        message id in the same chat. ``document`` is a ``Document`` dict or
        ``(file_name, data[, mime_type])``; ``photo`` is raw bytes or a list of ``PhotoSize``;
        ``voice`` is the bytes of an OGG/Opus voice note.
        Byte contents are registered so ``getFile`` and the download route serve them.
        ``migrate_to_chat_id`` makes the service message of a group upgraded to a supergroup;
        later sends to the old id then fail with ``migrate_to_chat_id`` like the real API.
        The update is checked with ``telegram.Update.de_json``; a bad fixture raises
        ``ValueError`` at once.
        """
        chat = self._remember_chat(chat)
        chat_id = int(chat["id"])
        message: JSON = {
            "message_id": self._last_message_id.get(chat_id, 0) + 1,
            "date": int(time.time()),
            "chat": copy.deepcopy(chat),
            "from": copy.deepcopy(user),
        }
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            if chat.get("is_forum"):
                message["is_topic_message"] = True
        if reply_to is not None:
            message["reply_to_message"] = _snapshot(self._find_message(chat_id, reply_to))
        files: list[_StoredFile] = []
        if migrate_to_chat_id is not None:
            message["migrate_to_chat_id"] = migrate_to_chat_id
        elif document is not None or photo is not None or voice is not None:
            if document is not None:
                message["document"] = self._document_object(document, files)
            if photo is not None:
                message["photo"] = self._photo_object(photo, files)
            if voice is not None:
                stored = self._new_file(voice, "voice/file_0.oga")
                files.append(stored)
                message["voice"] = {
                    "file_id": stored.file_id,
                    "file_unique_id": stored.file_unique_id,
                    "duration": 3,
                    "mime_type": "audio/ogg",
                    "file_size": len(voice),
                }
            if text:
                message["caption"] = text
                caption_entities = self._auto_entities(text) if entities is None else entities
                if caption_entities:
                    message["caption_entities"] = caption_entities
        elif text:
            message["text"] = text
            text_entities = self._auto_entities(text) if entities is None else entities
            if text_entities:
                message["entities"] = text_entities
        else:
            raise ValueError(
                "a message needs text, a document, a photo, a voice note or migrate_to_chat_id"
            )
        update = self._validated_update({"message": message})
        for stored in files:
            self._store_file(stored)
        self._last_message_id[chat_id] = message["message_id"]
        self._messages[(chat_id, message["message_id"])] = message
        if migrate_to_chat_id is not None:
            self._migrated[chat_id] = migrate_to_chat_id
            self._chats.setdefault(
                migrate_to_chat_id,
                {"id": migrate_to_chat_id, "type": "supergroup", "title": chat.get("title", "")},
            )
        return self._enqueue(update)

    def inject_callback(self, user: JSON, message: JSON, data: str) -> JSON:
        """Queue a ``callback_query`` update: ``user`` pressed a button with ``data``.

        ``message`` is the message carrying the keyboard (a dict from ``sent_messages()``,
        an update, or an API result); its latest stored state is used.
        """
        message = self._as_message(message)
        chat_id = int(message["chat"]["id"])
        current = self._messages.get((chat_id, int(message["message_id"])), message)
        query_id = str(next(self._callback_ids))
        update = self._validated_update(
            {
                "callback_query": {
                    "id": query_id,
                    "from": copy.deepcopy(user),
                    "chat_instance": str(abs(chat_id) * 7919 + 17),
                    "message": _snapshot(current),
                    "data": data,
                }
            }
        )
        self._issued_queries.add(query_id)
        return self._enqueue(update)

    def inject_update(self, payload: JSON) -> JSON:
        """Queue any other update, e.g. ``{"my_chat_member": {...}}``; ``update_id`` is added."""
        return self._enqueue(self._validated_update(copy.deepcopy(payload)))

    def pending_updates(self) -> list[JSON]:
        """Updates not yet confirmed by the bot (getUpdates offset) or delivered by webhook."""
        return copy.deepcopy(self._pending)

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

    def my_commands(self, scope: JSON | None = None, language_code: str = "") -> list[JSON]:
        """The command list stored by ``setMyCommands`` for a scope and language."""
        return copy.deepcopy(self._commands.get(self._commands_key(scope, language_code), []))

    @property
    def webhook(self) -> JSON | None:
        """The webhook set by ``setWebhook`` (url, secret_token, ...), or None."""
        return copy.deepcopy(self._webhook)

    async def wait_until_polling(self, timeout: float = DEFAULT_TIMEOUT) -> None:  # noqa: ASYNC109
        """Wait until a ``getUpdates`` long-poll is parked in the fake, i.e. the bot is idle."""
        await self._wait_until(lambda: self._waiting_polls > 0, timeout, "getUpdates long-poll")

    # -- test-side control ---------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        status: int,
        description: str = "",
        *,
        times: int = 1,
        when: BodyPredicate | None = None,
        **parameters: Any,
    ) -> None:
        """Make the next ``times`` calls of ``method`` answer this error; failures queue up.

        ``parameters`` become the error's ``parameters`` (``retry_after``,
        ``migrate_to_chat_id``). Without a description a standard one is used. ``when``
        limits the failure to calls whose parameters it accepts.
        """
        if not description:
            if "migrate_to_chat_id" in parameters:
                description = _MIGRATED
            elif status == 429 and "retry_after" in parameters:
                description = f"Too Many Requests: retry after {parameters['retry_after']}"
            else:
                description = _DEFAULT_DESCRIPTIONS.get(status, "Error")
        error = ApiError(status, description, parameters)
        self._queue_failure(method, error, times=times, when=when)

    def register_file(self, file_id: str, data: bytes, file_path: str | None = None) -> JSON:
        """Make ``getFile(file_id)`` and the download route serve ``data``; returns the File."""
        stored = _StoredFile(
            file_id=file_id,
            file_unique_id=f"u{file_id}",
            file_path=file_path or f"documents/{file_id}",
            data=data,
        )
        self._store_file(stored)
        return self._file_object(stored)

    # -- HTTP handlers -------------------------------------------------------------------------

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error_response(401, "Unauthorized")
        raw_method = request.match_info["method"]
        try:
            params = await self._read_params(request)
        except ApiError as exc:
            return _error_response(exc.status, exc.description, exc.parameters)
        entry = self._methods.get(raw_method.lower())
        method, handler = entry if entry else (raw_method, None)
        return await self._answer(
            request, BotApiCall(method, params), lambda record: self._respond(record, handler)
        )

    async def _respond(self, record: BotApiCall, handler: Handler | None) -> web.Response:
        try:
            if handler is None:
                raise ApiError(404, "Not Found")
            self._fail_if_queued(record)
            status, body = 200, {"ok": True, "result": await handler(record.data)}
        except ApiError as exc:
            status, body = exc.status, _error_body(exc.status, exc.description, exc.parameters)
        record.response = body
        return web.json_response(body, status=status)

    def _route_matches(self, route: str, record: BotApiCall) -> bool:
        # Method names are case-insensitive in the Bot API.
        return route.lower() == record.route.lower()

    async def _read_params(self, request: web.Request) -> JSON:
        raw: dict[str, Any] = dict(request.query)
        if request.method == "POST":
            if request.content_type == "application/json":
                body = await request.json()
                if not isinstance(body, dict):
                    raise ApiError(400, "Bad Request: parameters must be a JSON object")
                raw.update(body)
            else:
                raw.update(await request.post())
        params = _decode_params(raw)
        for value in params.values():
            if isinstance(value, Upload):
                self.uploads.append(value)
        return params

    async def _handle_download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error_response(401, "Unauthorized")
        stored = self._files_by_path.get(request.match_info["file_path"])
        if stored is None:
            return _error_response(404, "Not Found")
        return web.Response(body=stored.data, content_type="application/octet-stream")

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

    async def _get_updates(self, params: JSON) -> list[JSON]:
        if self._webhook is not None:
            raise ApiError(409, _GETUPDATES_WITH_WEBHOOK)
        offset = int(params.get("offset", 0))
        limit = min(max(int(params.get("limit", 100)), 1), 100)
        timeout = max(float(params.get("timeout", 0)), 0.0)
        if "allowed_updates" in params:
            self._allowed_updates = list(params["allowed_updates"]) or None
        if offset > 0:
            self._pending = [u for u in self._pending if u["update_id"] >= offset]
        elif offset < 0:
            self._pending = self._pending[offset:]
        self._drop_unwanted()
        self._poll_generation += 1
        generation = self._poll_generation
        if not self._pending and timeout > 0 and not self._closing:

            def ready() -> bool:
                self._drop_unwanted()
                return bool(
                    self._closing
                    or self._pending
                    or self._webhook is not None
                    or generation != self._poll_generation
                )

            self._waiting_polls += 1
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout), self._cond:
                        self._cond.notify_all()
                        await self._cond.wait_for(ready)
            finally:
                self._waiting_polls -= 1
            if generation != self._poll_generation:
                raise ApiError(409, _GETUPDATES_TERMINATED)
            if self._webhook is not None:
                raise ApiError(409, _GETUPDATES_WITH_WEBHOOK)
        return copy.deepcopy(self._pending[:limit])

    async def _set_webhook(self, params: JSON) -> bool:
        url = str(params.get("url", ""))
        if params.get("drop_pending_updates"):
            self._pending.clear()
        if "allowed_updates" in params:
            self._allowed_updates = list(params["allowed_updates"]) or None
        if not url:
            self._webhook = None
            return True
        secret = params.get("secret_token")
        if secret is not None and not _SECRET_RE.fullmatch(str(secret)):
            raise ApiError(400, "Bad Request: secret token contains unallowed characters")
        self._webhook = {
            "url": url,
            "secret_token": secret,
            "max_connections": int(params.get("max_connections", 40)),
            "allowed_updates": self._allowed_updates,
        }
        async with self._cond:
            self._cond.notify_all()
        return True

    async def _delete_webhook(self, params: JSON) -> bool:
        self._webhook = None
        if params.get("drop_pending_updates"):
            self._pending.clear()
        return True

    async def _get_webhook_info(self, params: JSON) -> JSON:
        info: JSON = {
            "url": self._webhook["url"] if self._webhook else "",
            "has_custom_certificate": False,
            "pending_update_count": len(self._pending),
        }
        if self._webhook:
            info["max_connections"] = self._webhook["max_connections"]
            if self._webhook["allowed_updates"]:
                info["allowed_updates"] = self._webhook["allowed_updates"]
            errors = [d for d in self.webhook_deliveries if d["error"]]
            if errors:
                info["last_error_date"] = errors[-1]["date"]
                info["last_error_message"] = errors[-1]["error"]
        return info

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
        files: list[_StoredFile] = []
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
            content["photo"] = [self._photo_size(stored)]
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

    async def _get_file(self, params: JSON) -> JSON:
        stored = self._files.get(str(params.get("file_id", "")))
        if stored is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        return self._file_object(stored)

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
            raise ApiError(400, _MIGRATED, {"migrate_to_chat_id": self._migrated[chat_id]})
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
            message["reply_to_message"] = _snapshot(reply)
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
        if isinstance(target_chat, str) and _INT_RE.fullmatch(target_chat):
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

    def _auto_entities(self, text: str) -> list[JSON]:
        entities: list[JSON] = []
        command = _BOT_COMMAND_RE.match(text)
        if command:
            entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(command[0])})
        for mention in _MENTION_RE.finditer(text):
            entities.append(
                {
                    "type": "mention",
                    "offset": utf16_len(text[: mention.start()]),
                    "length": utf16_len(mention[0]),
                }
            )
        return entities

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

    def _new_file(self, data: bytes, file_path: str) -> _StoredFile:
        number = next(self._file_ids)
        return _StoredFile(
            file_id=f"FILE{number:06d}",
            file_unique_id=f"UNIQ{number:06d}",
            file_path=f"{file_path.rsplit('/', 1)[0]}/file_{number}_{file_path.rsplit('/', 1)[-1]}",
            data=data,
        )

    def _store_file(self, stored: _StoredFile) -> None:
        self._files[stored.file_id] = stored
        self._files_by_path[stored.file_path] = stored

    @staticmethod
    def _file_object(stored: _StoredFile) -> JSON:
        return {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_size": len(stored.data),
            "file_path": stored.file_path,
        }

    @staticmethod
    def _photo_size(stored: _StoredFile) -> JSON:
        return {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "width": 320,
            "height": 320,
            "file_size": len(stored.data),
        }

    def _document_object(
        self,
        document: JSON | tuple[str, bytes] | tuple[str, bytes, str],
        files: list[_StoredFile],
    ) -> JSON:
        if isinstance(document, dict):
            return copy.deepcopy(document)
        name, data = document[0], document[1]
        stored = self._new_file(data, f"documents/{name}")
        files.append(stored)
        result: JSON = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_name": name,
            "file_size": len(data),
        }
        if len(document) == 3:
            result["mime_type"] = document[2]
        return result

    def _photo_object(self, photo: bytes | list[JSON], files: list[_StoredFile]) -> list[JSON]:
        if isinstance(photo, list):
            return copy.deepcopy(photo)
        stored = self._new_file(photo, "photos/photo.jpg")
        files.append(stored)
        return [self._photo_size(stored)]

    def _validated_update(self, payload: JSON) -> JSON:
        payload.pop("update_id", None)
        update = {"update_id": 0, **payload}
        try:
            parsed = Update.de_json(copy.deepcopy(update), None)
        except Exception as exc:
            raise ValueError(f"invalid update fixture: {exc!r}") from exc
        kinds = [key for key in payload if key != "update_id"]
        if len(kinds) != 1:
            raise ValueError(f"an update holds exactly one kind, got {kinds}")
        if parsed.api_kwargs:
            raise ValueError(f"invalid update fixture: unknown fields {dict(parsed.api_kwargs)}")
        inner = getattr(parsed, kinds[0], None)
        if inner is None:
            raise ValueError(f"invalid update fixture: {kinds[0]!r} was not understood")
        if getattr(inner, "api_kwargs", None):
            raise ValueError(
                f"invalid update fixture: unknown {kinds[0]} fields {dict(inner.api_kwargs)}"
            )
        return update

    def _enqueue(self, update: JSON) -> JSON:
        update["update_id"] = next(self._update_ids)
        self._pending.append(update)
        self._wake()
        return copy.deepcopy(update)

    def _drop_unwanted(self) -> None:
        allowed = self._allowed_updates
        self._pending = [
            u
            for u in self._pending
            if (_update_kind(u) in allowed if allowed else _update_kind(u) not in _OPT_IN_UPDATES)
        ]

    async def _deliver_webhooks(self) -> None:
        """Post pending updates, oldest first, to the webhook while one is set."""

        def ready() -> bool:
            if self._closing:
                return True
            if self._webhook is None:
                return False
            self._drop_unwanted()
            return bool(self._pending)

        while True:
            async with self._cond:
                await self._cond.wait_for(ready)
            if self._closing:
                return
            assert self._webhook is not None and self._session is not None
            update = self._pending[0]
            url = str(self._webhook["url"])
            headers = {"Content-Type": "application/json"}
            if self._webhook.get("secret_token"):
                headers["X-Telegram-Bot-Api-Secret-Token"] = str(self._webhook["secret_token"])
            status: int | None = None
            error = ""
            try:
                async with self._session.post(
                    url,
                    data=json.dumps(update),
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=10),
                ) as response:
                    status = response.status
                    await response.read()
                if not 200 <= status < 300:
                    error = f"Wrong response from the webhook: {status} {response.reason}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = f"Connection failed: {exc!r}"
            async with self._cond:
                self.webhook_deliveries.append(
                    {
                        "update_id": update["update_id"],
                        "url": url,
                        "status": status,
                        "error": error,
                        "date": int(time.time()),
                    }
                )
                if not error and self._pending and self._pending[0] is update:
                    self._pending.pop(0)
                self._cond.notify_all()
                if error:
                    # Retry after a short pause; stop() ends the pause at once.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.1):
                            await self._cond.wait_for(lambda: self._closing)
