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
"""

from __future__ import annotations

import contextlib
import hmac
import html
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from aiohttp import web
from telegram import (
    Bot,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatAction, ChatType, MessageEntityType, ParseMode
from telegram.error import BadRequest, ChatMigrated, Forbidden, TelegramError
from telegram.ext import (
    AIORateLimiter,
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from adapters.attachments import describe, safe_name, save_attachment
from adapters.telegram_format import render_html, split_html, split_plain, strip_html
from gateway.adapter import HttpRoute, Progress
from gateway.auth import NotAllowed
from gateway.engine.prompts import AlreadyAnswered, PromptError
from gateway.engine.task import MessageTooLong, TaskNotFound
from gateway.events import (
    AnswerEvent,
    AskUserEvent,
    Attachment,
    CanceledEvent,
    ConfirmEvent,
    ErrorEvent,
    Event,
    Inbound,
    Origin,
    TextDeltaEvent,
    TextEvent,
)
from gateway.ids import telegram_session_id
from gateway.logs import get_logger
from gateway.runtime import Runtime
from gateway.settings import TelegramMode

log = get_logger(__name__)

PLATFORM: Final = "telegram"
GREETING: Final = (
    "Hello! Mention me in a group, or write to me here, and I will answer. "
    "Everyone in a chat shares one conversation. Send /help for the commands."
)
ALIAS_PREFIX: Final = "tgalias:"
MAX_CHARS: Final = 4096
TYPING_EVERY_SECONDS: Final = 4.0
STREAM_EDIT_SECONDS: Final = 1.0
REFUSAL_EVERY_SECONDS: Final = 3600.0


@dataclass(frozen=True, slots=True)
class Place:
    """Where to answer: a chat, and a forum topic in it if any."""

    chat_id: int
    thread_id: int | None = None

    @classmethod
    def of(cls, origin: Origin) -> Place:
        chat, _, thread = origin.channel_id.partition(":")
        return cls(int(chat), int(thread) if thread else None)

    def channel(self) -> str:
        return f"{self.chat_id}:{self.thread_id}" if self.thread_id else str(self.chat_id)


def callback_data(kind: str, task_hash: str, choice: str) -> str:
    """Compact and under Telegram's 64 bytes: never the option label itself."""
    data = f"{kind}:{task_hash}:{choice}"
    assert len(data.encode()) <= 64
    return data


class TelegramAdapter:
    name = PLATFORM

    def __init__(self, runtime: Runtime, application: Application[Any, Any, Any, Any, Any, Any]):
        self.runtime = runtime
        self.app = application
        self.router = runtime.router
        self.admins = runtime.settings.admin_keys
        self.allowed = runtime.settings.telegram_allowed_chat_ids
        self._refused_at: dict[int, float] = {}
        self._typing_at: dict[Place, float] = {}
        # Prompt messages by task: where they are, so an answer can close them.
        self._prompts: dict[str, tuple[Place, int]] = {}
        # ForceReply questions: (chat, message id) → task hash.
        self._force_replies: dict[tuple[int, int], str] = {}
        # Chunks of a reply already sent, so a retried delivery resumes instead of repeating.
        # Groups that became supergroups: old chat id → new chat id.
        self._aliases: dict[int, int] = {}
        self.bot_id = 0
        self.bot_username = ""
        self._started = False
        application.add_handler(CallbackQueryHandler(self.on_callback))
        application.add_handler(MessageHandler(filters.ALL, self.on_message))
        application.add_error_handler(self.on_error)

    @classmethod
    def build(cls, runtime: Runtime) -> TelegramAdapter:
        settings = runtime.settings
        assert settings.telegram_token is not None
        root = settings.telegram_api_url.rstrip("/")
        builder = (
            ApplicationBuilder()
            .token(settings.telegram_token.get_secret_value())
            .base_url(f"{root}/bot")
            .base_file_url(f"{root}/file/bot")
            .rate_limiter(AIORateLimiter(max_retries=3))
        )
        if settings.telegram_mode is TelegramMode.webhook:
            # Updates arrive on the gateway's own HTTP server; no second web server.
            builder = builder.updater(None)
        return cls(runtime, builder.build())

    @property
    def webhook_mode(self) -> bool:
        return self.runtime.settings.telegram_mode is TelegramMode.webhook

    def routes(self) -> list[HttpRoute]:
        """In webhook mode, the path Telegram posts to (from the webhook URL)."""
        if not self.webhook_mode:
            return []
        path = urlsplit(self.runtime.settings.telegram_webhook_url).path or "/telegram"
        return [HttpRoute("POST", path, self.on_webhook)]

    async def on_webhook(self, request: web.Request) -> web.Response:
        secret = self.runtime.settings.telegram_webhook_secret
        expected = secret.get_secret_value().encode() if secret else b""
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "").encode()
        if not expected or not hmac.compare_digest(given, expected):
            return web.json_response(
                {"error": {"code": "forbidden", "message": "wrong webhook secret"}}, status=403
            )
        try:
            update = Update.de_json(await request.json(), self.bot)
        except (ValueError, TypeError, KeyError):
            return web.json_response(
                {"error": {"code": "bad_json", "message": "not a Telegram update"}}, status=400
            )
        await self.app.update_queue.put(update)
        return web.Response(status=200)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, *, poll_timeout: int = 30, poll_interval: float = 0.0) -> None:
        self._started = True
        await self.app.initialize()
        me = self.app.bot
        self.bot_id = me.id
        self.bot_username = me.username or ""
        menu = [(c.name, c.summary) for c in self.runtime.commands.menu(PLATFORM)]
        with contextlib.suppress(TelegramError):
            await me.set_my_commands(menu)
        for key, new in (await self.runtime.kv.scan(ALIAS_PREFIX)).items():
            self._aliases[int(key.removeprefix(ALIAS_PREFIX))] = int(new)
        self.sink = _Sink(self)
        self.router.register_sink(PLATFORM, self.sink)
        await self.app.start()
        settings = self.runtime.settings
        if self.webhook_mode:
            secret = settings.telegram_webhook_secret
            await self.bot.set_webhook(
                settings.telegram_webhook_url,
                secret_token=secret.get_secret_value() if secret else None,
                allowed_updates=Update.ALL_TYPES,
            )
            where = settings.telegram_webhook_url
        else:
            assert self.app.updater is not None
            await self.app.updater.start_polling(
                poll_interval=poll_interval, timeout=poll_timeout, drop_pending_updates=False
            )
            where = "long polling"
        log.info("adapter started", adapter=PLATFORM, bot=self.bot_username, via=where)

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self.app.updater is not None and self.app.updater.running:
            await self.app.updater.stop()
        if self.app.running:
            await self.app.stop()
        await self.app.shutdown()

    # -- inbound ---------------------------------------------------------------------------

    async def on_message(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        chat = update.effective_chat
        user = update.effective_user
        if message is not None and chat is not None and message.migrate_to_chat_id:
            await self.migrate(chat.id, message.migrate_to_chat_id)
            return
        if message is not None and chat is not None and message.migrate_from_chat_id:
            await self.migrate(message.migrate_from_chat_id, chat.id)
            return
        if message is None or chat is None or user is None or user.id == self.bot_id:
            return
        if self.allowed and chat.id not in self.allowed:
            await self._refuse(message)
            return
        text = message.text or message.caption or ""
        thread = message.message_thread_id if message.is_topic_message else None
        chat_id = self._aliases.get(chat.id, chat.id)
        place = Place(chat_id, thread)
        session_id = telegram_session_id(chat_id, thread)
        if text.split(maxsplit=1)[:1] in (["/start"], [f"/start@{self.bot_username}"]):
            await self.send_plain(place, GREETING, reply_to=message.message_id)
            return
        attachments = await self._attachments(message, session_id)
        if attachments:
            described = describe(attachments)
            text = f"{text}\n{described}" if text else described
        if not text:
            return
        origin = Origin(
            PLATFORM,
            channel_id=place.channel(),
            reply_to=str(message.message_id),
            sender_id=str(user.id),
            sender_name=user.full_name or user.username or str(user.id),
        )
        answered = await self._maybe_force_reply_answer(message, origin, text)
        if answered:
            return
        addressed, text = self._addressed(message, text)
        inbound = Inbound(origin, session_id, text, attachments)
        try:
            if chat.type == ChatType.PRIVATE or addressed:
                await self.router.submit(inbound)
            else:
                await self.router.record(inbound)
        except MessageTooLong as exc:
            await self.send_plain(place, f"⚠️ {exc}", reply_to=message.message_id)

    def _addressed(self, message: Message, text: str) -> tuple[bool, str]:
        """Whether a group message is for the bot, and its text without the mention."""
        mention = f"@{self.bot_username}" if self.bot_username else ""
        addressed = False
        # A photo or document carries its mention in the caption's entities.
        for entity, mentioned in [
            *((e, message.parse_entity) for e in message.entities or ()),
            *((e, message.parse_caption_entity) for e in message.caption_entities or ()),
        ]:
            if entity.type == MessageEntityType.BOT_COMMAND and entity.offset == 0:
                addressed = True
            is_mention = entity.type == MessageEntityType.MENTION and mention
            if is_mention and mentioned(entity).lower() == mention.lower():
                addressed = True
        replied = message.reply_to_message
        if replied is not None and replied.from_user is not None:
            addressed = addressed or replied.from_user.id == self.bot_id
        if mention and not text.startswith("/"):
            pattern = re.compile(rf"(?<!\w){re.escape(mention)}(?!\w)\s?", re.IGNORECASE)
            text = pattern.sub("", text).strip() or text
        return addressed, text

    async def _maybe_force_reply_answer(self, message: Message, origin: Origin, text: str) -> bool:
        replied = message.reply_to_message
        if replied is None:
            return False
        task_hash = self._force_replies.get((replied.chat.id, replied.message_id))
        if task_hash is None:
            return False
        place = Place.of(origin)
        try:
            state = self.router.task(task_hash)
            await self.router.answer(state.session_id, task_hash, origin, text=text)
        except NotAllowed as exc:
            await self.send_plain(place, f"⚠️ {exc}", reply_to=message.message_id)
            return True
        except (AlreadyAnswered, TaskNotFound, PromptError):
            await self.send_plain(place, "already answered", reply_to=message.message_id)
            return True
        self._force_replies.pop((replied.chat.id, replied.message_id), None)
        return True

    async def on_callback(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if query is None or not query.data:
            return
        kind, _, rest = query.data.partition(":")
        task_hash, _, choice = rest.partition(":")
        user = query.from_user
        responder = Origin(
            PLATFORM,
            sender_id=str(user.id),
            sender_name=user.full_name or user.username or str(user.id),
        )
        try:
            state = self.router.task(task_hash)
            if kind == "c":
                await self.router.answer(
                    state.session_id, task_hash, responder, approve=choice == "y"
                )
            elif kind == "a" and state.prompt is not None:
                options = list(state.prompt.options)
                index = int(choice)
                if not 0 <= index < len(options):
                    raise PromptError("that option does not exist")
                await self.router.answer(
                    state.session_id, task_hash, responder, text=options[index]
                )
            else:
                raise AlreadyAnswered("already answered")
        except NotAllowed as exc:
            await query.answer(str(exc), show_alert=True)
            return
        except (AlreadyAnswered, TaskNotFound):
            await query.answer("already answered")
            return
        except (PromptError, ValueError) as exc:
            await query.answer(str(exc), show_alert=True)
            return
        await query.answer("thanks")

    async def on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("telegram handler failed", error=repr(context.error), exc_info=context.error)

    async def _attachments(self, message: Message, session_id: str) -> list[Attachment]:
        """Download what came with the message into the session workspace."""
        found: list[tuple[Any, str, str]] = []
        if message.document is not None:
            doc = message.document
            found.append(
                (doc, doc.file_name or "document", doc.mime_type or "application/octet-stream")
            )
        if message.photo:
            found.append((message.photo[-1], "photo.jpg", "image/jpeg"))  # the largest size
        if message.voice is not None:
            found.append((message.voice, "voice.ogg", message.voice.mime_type or "audio/ogg"))
        if not found:
            return []
        await self.runtime.store.ensure(session_id)
        limit = self.runtime.settings.telegram_max_download_bytes
        saved: list[Attachment] = []
        for media, name, mime in found:
            size = int(media.file_size or 0)
            safe = safe_name(f"{media.file_unique_id}_{name}")
            if size > limit:
                saved.append(Attachment(safe, mime, size, ""))
                continue
            try:
                remote = await self.bot.get_file(media.file_id)
                data = bytes(await remote.download_as_bytearray())
            except TelegramError as exc:
                log.warning("attachment download failed", error=str(exc), name=name)
                saved.append(Attachment(safe, mime, size, ""))
                continue
            if len(data) > limit:
                saved.append(Attachment(safe, mime, len(data), ""))
                continue
            saved.append(await save_attachment(self.runtime.store, session_id, safe, mime, data))
        return saved

    async def migrate(self, old: int, new: int) -> None:
        """A group became a supergroup: its session, history and settings carry over."""
        if self._aliases.get(old) == new:
            return
        self._aliases[old] = new
        await self.runtime.kv.set(f"{ALIAS_PREFIX}{old}", str(new))
        moved = await self.runtime.store.rename(telegram_session_id(old), telegram_session_id(new))
        log.info("telegram group migrated", old=old, new=new, session_moved=moved)

    async def _refuse(self, message: Message) -> None:
        now = time.monotonic()
        last = self._refused_at.get(message.chat.id)
        if last is not None and now - last < REFUSAL_EVERY_SECONDS:
            return
        self._refused_at[message.chat.id] = now
        with contextlib.suppress(TelegramError):
            await message.reply_text("Sorry, this bot is not available in this chat.")

    # -- outbound --------------------------------------------------------------------------

    @property
    def bot(self) -> Bot:
        bot: Bot = self.app.bot
        return bot

    async def send(self, place: Place, text: str, **options: Any) -> Message:
        """send_message that follows a group to its supergroup when Telegram says it moved."""
        chat_id = self._aliases.get(place.chat_id, place.chat_id)
        try:
            sent: Message = await self.bot.send_message(
                chat_id, text, message_thread_id=place.thread_id, **options
            )
        except ChatMigrated as exc:
            await self.migrate(chat_id, exc.new_chat_id)
            sent = await self.bot.send_message(
                exc.new_chat_id, text, message_thread_id=place.thread_id, **options
            )
        return sent

    async def send_plain(self, place: Place, text: str, *, reply_to: int | None = None) -> Message:
        return await self.send(place, text, reply_parameters=_reply(reply_to))

    async def send_reply(self, origin: Origin, text: str, progress: Progress) -> str:
        """Send a reply in chunks; a retry (also after a restart) goes on after the chunks
        already sent."""
        place = Place.of(origin)
        chunks = split_html(render_html(text or "(empty reply)"), MAX_CHARS)
        last: Message | None = None
        for index in range(progress.sent, len(chunks)):
            reply_to = int(origin.reply_to) if index == 0 and origin.reply_to else None
            last = await self._send_chunk(place, chunks[index], reply_to)
            await progress.part_sent(index + 1)
        return str(last.message_id) if last else ""

    async def _send_chunk(self, place: Place, html: str, reply_to: int | None) -> Message:
        try:
            return await self.send(
                place, html, parse_mode=ParseMode.HTML, reply_parameters=_reply(reply_to)
            )
        except BadRequest as exc:
            if "parse" not in str(exc).lower() and "entit" not in str(exc).lower():
                raise
            log.warning("telegram rejected the markup; sending plain text", error=str(exc))
            last: Message | None = None
            for part in split_plain(strip_html(html), MAX_CHARS):
                last = await self.send(place, part, reply_parameters=_reply(reply_to))
                reply_to = None
            assert last is not None
            return last

    async def send_prompt(self, origin: Origin, event: ConfirmEvent | AskUserEvent) -> str:
        place = Place.of(origin)
        reply_to = int(origin.reply_to) if origin.reply_to else None
        markup: InlineKeyboardMarkup | ForceReply | None
        if isinstance(event, ConfirmEvent):
            args = json.dumps(event.args, ensure_ascii=False)
            text = f"🔐 {event.requester}, allow <b>{_esc(event.tool)}</b> {_esc(args)}?"
            markup = InlineKeyboardMarkup(
                [
                    [
                        InlineKeyboardButton(
                            "Approve", callback_data=callback_data("c", event.task_hash, "y")
                        ),
                        InlineKeyboardButton(
                            "Deny", callback_data=callback_data("c", event.task_hash, "n")
                        ),
                    ]
                ]
            )
        elif event.options:
            text = f"❓ {event.requester}: {_esc(event.question)}"
            markup = InlineKeyboardMarkup(
                [
                    [
                        InlineKeyboardButton(
                            label[:64], callback_data=callback_data("a", event.task_hash, str(i))
                        )
                    ]
                    for i, label in enumerate(event.options[:25])
                ]
            )
        else:
            text = (
                f"❓ {event.requester}: {_esc(event.question)}\n"
                "<i>Reply to this message to answer.</i>"
            )
            markup = ForceReply(selective=True, input_field_placeholder="your answer")
        sent = await self.send(
            place,
            text,
            parse_mode=ParseMode.HTML,
            reply_parameters=_reply(reply_to),
            reply_markup=markup,
        )
        self._prompts[event.task_hash] = (place, sent.message_id)
        if isinstance(markup, ForceReply):
            self._force_replies[(place.chat_id, sent.message_id)] = event.task_hash
        return str(sent.message_id)

    async def close_prompt(self, event: AnswerEvent) -> None:
        """After an answer: remove the keyboard and say who answered what."""
        where = self._prompts.pop(event.task_hash, None)
        if where is None:
            return
        place, message_id = where
        if event.prompt == "confirm":
            outcome = "approved" if event.approved else "denied"
        else:
            outcome = f"answered “{event.answer}”" if event.answer is not None else "not answered"
        who = "nobody (expired)" if event.answered_by == "timeout" else event.answered_by
        with contextlib.suppress(BadRequest):
            await self.bot.edit_message_text(
                f"{outcome} by {who}", chat_id=place.chat_id, message_id=message_id
            )

    async def typing(self, origin: Origin) -> None:
        place = Place.of(origin)
        now = time.monotonic()
        if now - self._typing_at.get(place, 0.0) < TYPING_EVERY_SECONDS:
            return
        self._typing_at[place] = now
        with contextlib.suppress(TelegramError):
            await self.bot.send_chat_action(
                place.chat_id, ChatAction.TYPING, message_thread_id=place.thread_id
            )


@dataclass
class _Stream:
    """Text streamed so far by a task, shown in one message edited at most once a second."""

    place: Place
    text: str = ""
    message_id: int | None = None
    shown_at: float = 0.0


class _Sink:
    """What the router sends to Telegram origins."""

    def __init__(self, adapter: TelegramAdapter) -> None:
        self.adapter = adapter
        self._streams: dict[str, _Stream] = {}

    async def _stream(self, origin: Origin, event: TextDeltaEvent) -> None:
        stream = self._streams.setdefault(event.task_hash, _Stream(Place.of(origin)))
        stream.text += event.text
        now = time.monotonic()
        if now - stream.shown_at < STREAM_EDIT_SECONDS:
            return
        stream.shown_at = now
        shown = stream.text[: MAX_CHARS // 2] or "…"
        bot = self.adapter.bot
        with contextlib.suppress(BadRequest):
            if stream.message_id is None:
                reply_to = int(origin.reply_to) if origin.reply_to else None
                sent = await self.adapter.send_plain(stream.place, shown, reply_to=reply_to)
                stream.message_id = sent.message_id
            else:
                await bot.edit_message_text(
                    shown, chat_id=stream.place.chat_id, message_id=stream.message_id
                )

    async def _end_stream(self, task_hash: str) -> None:
        """The final reply replaces the streamed preview."""
        stream = self._streams.pop(task_hash, None)
        if stream is not None and stream.message_id is not None:
            with contextlib.suppress(TelegramError):
                await self.adapter.bot.delete_message(stream.place.chat_id, stream.message_id)

    async def deliver(self, origin: Origin, event: Event, progress: Progress) -> str | None:
        adapter = self.adapter
        try:
            if isinstance(event, TextDeltaEvent):
                await adapter.typing(origin)
                await self._stream(origin, event)
                return None
            if isinstance(event, TextEvent):
                reply_id = await adapter.send_reply(origin, event.text, progress)
                await self._end_stream(event.task_hash)
                return reply_id
            if isinstance(event, ConfirmEvent | AskUserEvent):
                return await adapter.send_prompt(origin, event)
            if isinstance(event, AnswerEvent):
                await adapter.close_prompt(event)
            elif isinstance(event, ErrorEvent):
                warning = await adapter.send_plain(Place.of(origin), f"⚠️ {event.message}")
                return str(warning.message_id)
            elif isinstance(event, CanceledEvent):
                await self._end_stream(event.task_hash)
                await adapter.send_plain(Place.of(origin), f"canceled by {event.by}")
            else:
                await adapter.typing(origin)
        except Forbidden as exc:
            # Removed from the chat: nothing can reach it, so its open prompts are canceled.
            log.warning("telegram chat unreachable", chat=origin.channel_id, error=str(exc))
            await adapter.router.cancel_all(event.session_id, by="telegram: bot removed")
        return None

    async def notice(self, origin: Origin, text: str) -> None:
        place = Place.of(origin)
        reply_to = int(origin.reply_to) if origin.reply_to else None
        with contextlib.suppress(Forbidden):
            await self.adapter.send_plain(place, text, reply_to=reply_to)


def _reply(message_id: int | None) -> ReplyParameters | None:
    if message_id is None:
        return None
    return ReplyParameters(message_id=message_id, allow_sending_without_reply=True)


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def create(runtime: Runtime) -> TelegramAdapter:
    return TelegramAdapter.build(runtime)
