"""The Telegram adapter: the python-telegram-bot application, its handlers, and the chat
primitives the shared base (`adapters.chat`) builds on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, ClassVar, Final
from urllib.parse import urlsplit

from telegram import Bot, Message, Update
from telegram.constants import ChatAction, ChatType
from telegram.error import BadRequest, Forbidden, NetworkError, TelegramError
from telegram.ext import (
    Application,
    ApplicationBuilder,
    ApplicationHandlerStop,
    CallbackQueryHandler,
    ContextTypes,
    MessageHandler,
    TypeHandler,
    filters,
)

from adapters.chat import ALREADY_ANSWERED, Arrival, Posted, Refused, Throttle
from adapters.reconnect import Connection
from adapters.telegram.admins import ChatAdmins, naming_reply
from adapters.telegram.connect import connect, refused_token
from adapters.telegram.documents import PrivateDocuments
from adapters.telegram.incoming import addressed, display_name, downloads
from adapters.telegram.place import Chats, Place
from adapters.telegram.polling import Poller
from adapters.telegram.prompts import answered_by_reply, parse_press
from adapters.telegram.render import render_html
from adapters.telegram.sender import MAX_CHARS, CountingRateLimiter, Sender
from adapters.telegram.split import split_html
from adapters.telegram.webhook import Webhook
from gateway.adapter import HttpRoute, Undeliverable
from gateway.connections import env_token
from gateway.events import AskUserEvent, ConfirmEvent, Event, Origin
from gateway.ids import telegram_session_id
from gateway.leadership import Leadership
from gateway.logs import get_logger
from gateway.runtime import Runtime
from gateway.settings import TelegramMode
from gateway.store.errors import DatabaseUnavailable

log = get_logger(__name__)

PLATFORM: Final = "telegram"
GREETING: Final = (
    "Hello! Mention me in a group, or write to me here, and I will answer. "
    "Everyone in a chat shares one conversation. Send /help for the commands."
)
REFUSAL: Final = "Sorry, this bot is not available in this chat."
REFUSAL_EVERY_SECONDS: Final = 3600.0
POLLER_LEASE: Final = "telegram:poller"
# What the bot handles; other kinds of update are not asked for.
UPDATES: Final = (Update.MESSAGE, Update.EDITED_MESSAGE, Update.CALLBACK_QUERY)
# In front of a part sent again after a crash that may have come after Telegram took it: the
# Bot API cannot say whether it did, so the copy says it may be one (README, "Telegram").
REPEAT_MARK: Final = "↻ "
# In front of the new text of an edited message, kept as context (see `on_message`).
EDITED_MARK: Final = "(edited) "

TelegramApplication = Application[Any, Any, Any, Any, Any, Any]


class TelegramAdapter(PrivateDocuments):
    name = PLATFORM
    errors: ClassVar[tuple[type[Exception], ...]] = (TelegramError,)
    forbidden: ClassVar[type[Exception]] = Forbidden
    typing_every: ClassVar[float] = 4.0  # Telegram shows "typing" for 5 s
    preview_chars: ClassVar[int] = MAX_CHARS // 2
    redelivers: ClassVar[bool] = True  # until its update is confirmed
    preview_replies: ClassVar[bool] = True

    def __init__(self, runtime: Runtime, application: TelegramApplication) -> None:
        super().__init__(runtime)
        self.app = application
        self.allowed = runtime.settings.telegram_allowed_chat_ids
        self.chats = Chats(runtime)
        self.sender = Sender(lambda: self.bot, self.chats)
        self.poller = Poller(lambda: self.bot, self.handle, runtime.clock, updates=UPDATES)
        # With several instances, one of them polls: whichever holds the poller's lease.
        self.polling = Leadership(
            runtime.leases,
            POLLER_LEASE,
            runtime.clock,
            retry_seconds=runtime.settings.lease_ttl_seconds / 3,
            start=self._start_polling,
            stop=self.poller.stop,
        )
        secret = runtime.settings.telegram_webhook_secret
        self.webhook = Webhook(
            secret.get_secret_value() if secret else "", lambda: self.bot, self.handle
        )
        self._refusals = Throttle(runtime.clock, REFUSAL_EVERY_SECONDS)
        self.admins = ChatAdmins(lambda: self.bot, runtime.clock)
        if runtime.bans is not None:
            runtime.bans.register_admin_check(PLATFORM, self.admins.of_session)
        self._one_at_a_time = asyncio.Lock()
        self._failed = False
        self._unavailable: DatabaseUnavailable | None = None
        self.bot_id = 0
        self.bot_username = ""
        self._started = False
        self.connection = Connection(
            PLATFORM,
            runtime.platforms,
            self._connect,
            fatal=refused_token,
            max_wait=runtime.settings.platform_retry_max_seconds,
            # What waited for the platform while it was down goes out once it connects.
            connected=runtime.engine.courier.redeliver,
        )
        # The allow-list goes first, for every kind of update (group -1 runs before 0).
        application.add_handler(TypeHandler(Update, self.gate), group=-1)
        application.add_handler(CallbackQueryHandler(self.on_callback))
        application.add_handler(MessageHandler(filters.ALL, self.on_message))
        application.add_error_handler(self.on_error)

    @classmethod
    def build(cls, runtime: Runtime, *, token: str | None = None) -> TelegramAdapter:
        settings = runtime.settings
        token = token or env_token(settings, "telegram") or ""  # a live connection, or .env
        root = settings.telegram_api_url.rstrip("/")
        builder = (
            ApplicationBuilder()
            .token(token)
            .base_url(f"{root}/bot")
            .base_file_url(f"{root}/file/bot")
            .rate_limiter(CountingRateLimiter(runtime.router.traffic, max_retries=3))
            # Updates come from `Poller` or `Webhook`, each confirmed only once handled.
            .updater(None)
        )
        return cls(runtime, builder.build())

    @property
    def bot(self) -> Bot:
        bot: Bot = self.app.bot
        return bot

    @property
    def webhook_mode(self) -> bool:
        return self.runtime.settings.telegram_mode is TelegramMode.webhook

    def routes(self) -> list[HttpRoute]:
        """In webhook mode, the path Telegram posts to (from the webhook URL)."""
        if not self.webhook_mode:
            return []
        path = urlsplit(self.runtime.settings.telegram_webhook_url).path or "/telegram"
        return [HttpRoute("POST", path, self.webhook.on_post)]

    async def handle(self, update: Update) -> bool:
        """Run the handlers on `update`, one update at a time in the order they came; False
        when a handler failed (it is logged by `on_error`). Raises `DatabaseUnavailable` when
        the archive could not be reached: the update is to be handled again, not dropped."""
        async with self._one_at_a_time:
            self._failed, self._unavailable = False, None
            await self.app.process_update(update)
            if self._unavailable is not None:
                raise self._unavailable
            return not self._failed

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, *, poll_timeout: int | None = None) -> None:
        """Connect, or go on trying in the background while Telegram cannot be reached (see
        adapters/reconnect.py); raises only for a token Telegram refuses."""
        self._started = True
        if poll_timeout is not None:
            self.poller.timeout = poll_timeout
        await self.connection.start()

    async def _connect(self) -> None:
        await connect(self, UPDATES)

    async def _start_polling(self) -> None:
        self.poller.start()

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        await self.connection.stop()
        await self.polling.end()
        if self.app.running:
            await self.app.stop()
        await self.app.shutdown()

    # -- inbound ---------------------------------------------------------------------------

    async def gate(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        """Stop an update from a chat off the allow-list before any handler sees it."""
        if self._admits(update):
            return
        query = update.callback_query
        message = update.effective_message
        if query is not None:
            await _answer_query(query.answer(REFUSAL, show_alert=True))
        elif message is not None and message.from_user is not None and not _is_migration(message):
            await self._refuse(message)
        raise ApplicationHandlerStop

    def _admits(self, update: Update) -> bool:
        if not self.allowed:
            return True
        chat = update.effective_chat
        if chat is None or not self._allowed_chat(chat.id):
            return False
        # A group that became a supergroup: the session that moves must be an allowed one.
        message = update.effective_message
        moved_from = message.migrate_from_chat_id if message is not None else None
        return moved_from is None or self._allowed_chat(moved_from)

    def _allowed_chat(self, chat_id: int) -> bool:
        """On the allow-list, or the supergroup an allowed group became."""
        return chat_id in self.allowed or any(
            self.chats.current(allowed) == chat_id for allowed in self.allowed
        )

    async def on_message(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        chat = update.effective_chat
        user = update.effective_user
        if message is not None and chat is not None and _is_migration(message):
            if message.migrate_to_chat_id:
                await self.chats.migrate(chat.id, message.migrate_to_chat_id)
            elif message.migrate_from_chat_id:
                await self.chats.migrate(message.migrate_from_chat_id, chat.id)
            return
        if message is None or chat is None or user is None or user.id == self.bot_id:
            return
        thread = message.message_thread_id if message.is_topic_message else None
        chat_id = self.chats.current(chat.id)
        place = Place(chat_id, thread)
        origin = Origin(
            PLATFORM,
            channel_id=place.channel(),
            reply_to=str(message.message_id),
            sender_id=str(user.id),
            sender_name=display_name(user),
            # Updates are handled one at a time, so this call cannot reorder messages.
            is_admin=await self.admins.is_admin(chat_id, chat.type, user.id),
        )
        text = message.text or message.caption or ""
        if text.split(maxsplit=1)[:1] in (["/start"], [f"/start@{self.bot_username}"]):
            await self.say(origin, GREETING)
            return
        for_bot, text = addressed(message, self.bot_id, self.bot_username)
        text = naming_reply(text, message, self.bot_id)
        replied = message.reply_to_message
        # An edit (a typo fixed, a line added) is kept as context, not answered again: a second
        # reply to a question already answered is not what the one who edited it asked for.
        edited = update.edited_message is not None
        await self.arrive(
            Arrival(
                origin,
                telegram_session_id(chat_id, thread),
                f"{EDITED_MARK}{text}" if edited else text,
                addressed=not edited and (chat.type == ChatType.PRIVATE or for_bot),
                downloads=() if edited else downloads(message, self._fetch),
                replied_to=_posted(replied) if replied is not None else None,
                source_key=f"telegram:{self.bot_id}:{update.update_id}",
            )
        )

    async def _fetch(self, file_id: str) -> bytes:
        remote = await self.bot.get_file(file_id)
        return bytes(await remote.download_as_bytearray())

    async def on_callback(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if query is None or not query.data:
            return
        press = parse_press(query.data)
        chat = query.message.chat if query.message is not None else None
        responder = Origin(
            PLATFORM,
            sender_id=str(query.from_user.id),
            sender_name=display_name(query.from_user),
            is_admin=chat is not None
            and await self.admins.is_admin(chat.id, chat.type, query.from_user.id),
        )
        if press is None:
            await _answer_query(query.answer(ALREADY_ANSWERED))
            return
        result = await self.prompts.answer(
            press.task_hash, responder, approve=press.approve, option=press.option
        )
        if isinstance(result, Refused):
            await _answer_query(query.answer(result.reason, show_alert=result.alert))
        else:
            await _answer_query(query.answer("thanks"))  # the answer event closes the prompt

    async def on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        self._failed = True
        if isinstance(context.error, DatabaseUnavailable):
            self._unavailable = context.error
            return  # not a failure of this update: the poller holds it until the archive is back
        log.error("telegram handler failed", error=repr(context.error), exc_info=context.error)

    async def _refuse(self, message: Message) -> None:
        if not self._refusals.ready(str(message.chat.id)):
            return
        with contextlib.suppress(TelegramError):
            await message.reply_text(REFUSAL)

    # -- chat primitives -------------------------------------------------------------------

    @property
    def max_download_bytes(self) -> int:
        return self.runtime.settings.telegram_max_download_bytes

    def split(self, text: str) -> list[str]:
        # Room for the mark, so a part is the same whether it goes out marked or not.
        return split_html(render_html(text), MAX_CHARS - len(REPEAT_MARK))

    async def send_part(
        self, origin: Origin, part: str, *, index: int, key: str, repeat: bool
    ) -> Posted:
        reply_to = _reply_id(origin) if index == 0 else None
        html = REPEAT_MARK + part if repeat else part
        return _posted(await self.sender.html(Place.of(origin), html, reply_to=reply_to))

    def may_have_arrived(self, exc: Exception) -> bool:
        # Sending failed with no answer from Telegram (a timeout, a connection lost
        # mid-request: the library's NetworkError raised from the transport's error); an
        # error answer (4xx, 5xx, RetryAfter) says Telegram did not take the message.
        return isinstance(exc, NetworkError) and exc.__cause__ is not None

    async def send_text(self, origin: Origin, text: str, *, reply: bool) -> Posted:
        reply_to = _reply_id(origin) if reply else None
        return _posted(await self.sender.plain(Place.of(origin), text, reply_to=reply_to))

    async def edit_text(self, posted: Posted, text: str) -> None:
        await self.bot.edit_message_text(
            text, chat_id=int(posted.channel), message_id=int(posted.message_id)
        )

    async def delete(self, posted: Posted) -> None:
        await self.bot.delete_message(int(posted.channel), int(posted.message_id))

    async def send_typing(self, origin: Origin) -> None:
        place = Place.of(origin)
        await self.bot.send_chat_action(
            self.chats.current(place.chat_id), ChatAction.TYPING, message_thread_id=place.thread_id
        )

    async def post_prompt(self, origin: Origin, event: ConfirmEvent | AskUserEvent) -> Posted:
        sent = await self.sender.prompt(Place.of(origin), event, reply_to=_reply_id(origin))
        return _posted(sent)

    def answered_by_reply(self, event: ConfirmEvent | AskUserEvent) -> bool:
        return answered_by_reply(event)

    def posted_at(self, origin: Origin, message_id: str) -> Posted:
        return Posted(str(self.chats.current(Place.of(origin).chat_id)), message_id)

    async def retire_prompt(self, posted: Posted, event: ConfirmEvent | AskUserEvent) -> None:
        await self.sender.retire_prompt(int(posted.channel), int(posted.message_id), event)

    async def show_outcome(self, posted: Posted, outcome: str) -> None:
        # Editing the text without a reply_markup takes the keyboard away.
        await self.edit_text(posted, outcome)

    async def unreachable(self, origin: Origin, event: Event, exc: Exception) -> str | None:
        # Removed from the chat: nothing can reach it, so its open prompts are canceled, and
        # the entry ends as failed rather than delivered.
        log.warning("telegram chat unreachable", chat=origin.channel_id, error=str(exc))
        await self.router.cancel_all(event.session_id, by="telegram: bot removed")
        raise Undeliverable(str(exc)) from exc

    def refused_for_good(self, exc: Exception) -> bool:
        # 400: the chat is not found, the message is one Telegram will never take. A 5xx, a
        # 429 or no answer at all passes.
        return isinstance(exc, BadRequest)


def _is_migration(message: Message) -> bool:
    return bool(message.migrate_to_chat_id or message.migrate_from_chat_id)


def _posted(message: Message) -> Posted:
    return Posted(str(message.chat_id), str(message.message_id))


def _reply_id(origin: Origin) -> int | None:
    return int(origin.reply_to) if origin.reply_to else None


async def _answer_query(answering: Awaitable[bool]) -> None:
    """Answer a button press; Telegram refuses a second answer to a press delivered again
    (after a crash): that is no failure of the update."""
    try:
        await answering
    except TelegramError as exc:
        log.info("callback query not answered", error=str(exc))
