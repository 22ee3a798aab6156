"""Updates: the queue tests inject into, and how it reaches the bot, by getUpdates long-poll
or by webhook.

Injected updates are checked with ``telegram.Update.de_json`` at once: PTB skips an update
it cannot parse without advancing its offset, and would re-poll it in a hot loop.
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

import aiohttp
from telegram import Update

from ..base import DEFAULT_TIMEOUT, JSON
from .api import ApiError
from .entities import auto_entities
from .files import StoredFile, TelegramFiles
from .state import snapshot

# Update kinds the Bot API leaves out unless they are listed in allowed_updates.
_OPT_IN_UPDATES = frozenset({"chat_member", "message_reaction", "message_reaction_count"})
_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")

_GETUPDATES_WITH_WEBHOOK = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
_GETUPDATES_TERMINATED = (
    "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running"
)


def _update_kind(update: JSON) -> str:
    return next((key for key in update if key != "update_id"), "")


class TelegramUpdates(TelegramFiles):
    """Pending updates, long-polls waiting for them, and the webhook they may go to instead."""

    def __init__(self) -> None:
        super().__init__()
        self.webhook_deliveries: list[JSON] = []
        self._pending: list[JSON] = []
        self._update_ids = itertools.count(1)
        self._callback_ids = itertools.count(4_000_000_000_001)
        self._issued_queries: set[str] = set()
        self._allowed_updates: list[str] | None = None
        self._webhook: JSON | None = None
        self._poll_generation = 0
        self._waiting_polls = 0
        self._closing = False
        self._session: aiohttp.ClientSession | None = None
        # Called with each getUpdates call's parameters before it is answered.
        self.on_get_updates: Callable[[JSON], Awaitable[None]] | None = None

    # -- lifecycle: webhook delivery runs while the server does --------------------------------

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

    # -- test side -----------------------------------------------------------------------------

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
        audio: tuple[str, bytes, str] | None = None,
        migrate_to_chat_id: int | None = None,
    ) -> JSON:
        """Queue a ``message`` update from ``user`` in ``chat`` and return the update.

        ``text`` becomes the caption when a document or photo is attached. Unless ``entities``
        is given, a ``bot_command`` entity is added for a leading ``/command`` and a ``mention``
        entity for every ``@username``. ``reply_to`` is a message (or update) dict or a
        message id in the same chat. ``document`` is a ``Document`` dict or
        ``(file_name, data[, mime_type])``; ``photo`` is raw bytes or a list of ``PhotoSize``;
        ``voice`` is the bytes of an OGG/Opus voice note; ``audio`` an audio file
        ``(file_name, data, mime_type)``.
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
            message["reply_to_message"] = snapshot(self._find_message(chat_id, reply_to))
        files: list[StoredFile] = []
        if migrate_to_chat_id is not None:
            message["migrate_to_chat_id"] = migrate_to_chat_id
        elif any(media is not None for media in (document, photo, voice, audio)):
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
            if audio is not None:
                file_name, data, mime_type = audio
                stored = self._new_file(data, f"music/{file_name}")
                files.append(stored)
                message["audio"] = {
                    "file_id": stored.file_id,
                    "file_unique_id": stored.file_unique_id,
                    "duration": 3,
                    "file_name": file_name,
                    "mime_type": mime_type,
                    "file_size": len(data),
                }
            if text:
                message["caption"] = text
                caption_entities = auto_entities(text) if entities is None else entities
                if caption_entities:
                    message["caption_entities"] = caption_entities
        elif text:
            message["text"] = text
            text_entities = auto_entities(text) if entities is None else entities
            if text_entities:
                message["entities"] = text_entities
        else:
            raise ValueError(
                "a message needs text, a document, a photo, a voice note, audio "
                "or migrate_to_chat_id"
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
                    "message": snapshot(current),
                    "data": data,
                }
            }
        )
        self._issued_queries.add(query_id)
        return self._enqueue(update)

    def inject_update(self, payload: JSON) -> JSON:
        """Queue any other update, e.g. ``{"my_chat_member": {...}}``; ``update_id`` is added."""
        return self._enqueue(self._validated_update(copy.deepcopy(payload)))

    def redeliver(self, update: JSON) -> None:
        """Queue ``update`` again, as it was (same ``update_id``), the way Telegram delivers an
        update once more when the bot never confirmed it; it goes in update_id order."""
        self._pending.append(copy.deepcopy(update))
        self._pending.sort(key=lambda u: int(u["update_id"]))
        self._wake()

    def pending_updates(self) -> list[JSON]:
        """Updates not yet confirmed by the bot (getUpdates offset) or delivered by webhook."""
        return copy.deepcopy(self._pending)

    @property
    def webhook(self) -> JSON | None:
        """The webhook set by ``setWebhook`` (url, secret_token, ...), or None."""
        return copy.deepcopy(self._webhook)

    async def wait_until_polling(self, timeout: float = DEFAULT_TIMEOUT) -> None:  # noqa: ASYNC109
        """Wait until a ``getUpdates`` long-poll is parked in the fake, i.e. the bot is idle."""
        await self._wait_until(lambda: self._waiting_polls > 0, timeout, "getUpdates long-poll")

    # -- internals -----------------------------------------------------------------------------

    async def _get_updates(self, params: JSON) -> list[JSON]:
        if self.on_get_updates is not None:
            await self.on_get_updates(params)
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
