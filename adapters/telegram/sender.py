"""Sending to Telegram: messages follow a group to its supergroup, and HTML that Telegram
rejects goes out again as plain text, so a reply is never dropped over its markup."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Final

from telegram import Bot, Message, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import BadRequest, ChatMigrated, RetryAfter
from telegram.ext import AIORateLimiter

from adapters.chat.prompts import ASKED_AGAIN
from adapters.telegram.place import Chats, Place
from adapters.telegram.prompts import prompt_message
from adapters.telegram.split import TELEGRAM_MESSAGE_LIMIT, split_plain, strip_html
from gateway.engine import Traffic
from gateway.events import AskUserEvent, ConfirmEvent
from gateway.logs import get_logger

log = get_logger(__name__)

MAX_CHARS: Final = TELEGRAM_MESSAGE_LIMIT


class CountingRateLimiter(AIORateLimiter):
    """python-telegram-bot's rate limiter, which waits out a 429 and tries again itself:
    each 429 is counted first (/metrics), through the limiter's public hook, as no error
    reaches the adapter for a 429 that a retry got past."""

    def __init__(self, traffic: Traffic, **options: Any) -> None:
        super().__init__(**options)
        self._traffic = traffic

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, Any]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: Any,
    ) -> Any:
        async def counted(*call_args: Any, **call_kwargs: Any) -> Any:
            try:
                return await callback(*call_args, **call_kwargs)
            except RetryAfter:
                self._traffic.throttled("telegram")
                raise

        return await super().process_request(counted, args, kwargs, endpoint, data, rate_limit_args)


class Sender:
    def __init__(self, bot: Callable[[], Bot], chats: Chats) -> None:
        self._bot = bot  # the application's bot, once it is built
        self.chats = chats

    @property
    def bot(self) -> Bot:
        return self._bot()

    async def send(self, place: Place, text: str, **options: Any) -> Message:
        """send_message that follows a group to its supergroup when Telegram says it moved."""
        chat_id = self.chats.current(place.chat_id)
        try:
            sent: Message = await self.bot.send_message(
                chat_id, text, message_thread_id=place.thread_id, **options
            )
        except ChatMigrated as exc:
            await self.chats.migrate(chat_id, exc.new_chat_id)
            sent = await self.bot.send_message(
                exc.new_chat_id, text, message_thread_id=place.thread_id, **options
            )
        return sent

    async def plain(self, place: Place, text: str, *, reply_to: int | None = None) -> Message:
        return await self.send(place, text, reply_parameters=reply(reply_to))

    async def html(self, place: Place, html: str, *, reply_to: int | None = None) -> Message:
        """A chunk of rendered HTML, or its text in plain parts if Telegram rejects the markup."""
        try:
            return await self.send(
                place, html, parse_mode=ParseMode.HTML, reply_parameters=reply(reply_to)
            )
        except BadRequest as exc:
            if "parse" not in str(exc).lower() and "entit" not in str(exc).lower():
                raise
            log.warning("telegram rejected the markup; sending plain text", error=str(exc))
        last: Message | None = None
        for part in split_plain(strip_html(html), MAX_CHARS):
            last = await self.plain(place, part, reply_to=reply_to)
            reply_to = None
        assert last is not None
        return last

    async def prompt(
        self, place: Place, event: ConfirmEvent | AskUserEvent, *, reply_to: int | None
    ) -> Message:
        text, markup = prompt_message(event)
        return await self.send(
            place,
            text,
            parse_mode=ParseMode.HTML,
            reply_parameters=reply(reply_to),
            reply_markup=markup,
        )

    async def retire_prompt(
        self, chat_id: int, message_id: int, event: ConfirmEvent | AskUserEvent
    ) -> None:
        """An earlier asking of a prompt: its text, saying it was asked again, without its
        keyboard (an edit without a reply_markup takes it away)."""
        text, _ = prompt_message(event)
        await self.bot.edit_message_text(
            f"{text}\n<i>{ASKED_AGAIN}</i>",
            chat_id=chat_id,
            message_id=message_id,
            parse_mode=ParseMode.HTML,
        )


def reply(message_id: int | None) -> ReplyParameters | None:
    if message_id is None:
        return None
    return ReplyParameters(message_id=message_id, allow_sending_without_reply=True)
