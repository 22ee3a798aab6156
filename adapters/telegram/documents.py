"""A command's document (a member's export), sent where only the one who asked sees it: their
private chat with the bot. Asked in a private chat, it comes there; asked in a group, it goes
to the member's private chat (a user's private chat id is their user id) and the group is told
so. Telegram lets a bot write first to nobody: a member who never started the bot (or blocked
it) gets a 403, and is told in the group how to get it."""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import Final

from telegram import Bot
from telegram.error import Forbidden, TelegramError

from adapters.chat import Arrival, ChatAdapter
from gateway.commands.registry import CommandReply
from gateway.engine import Submission
from gateway.logs import get_logger

log = get_logger(__name__)

# What the Bot API takes in a sendDocument upload.
MAX_DOCUMENT_BYTES: Final = 50 * 1024 * 1024


class PrivateDocuments(ChatAdapter):
    """The Telegram adapter's intake, followed by the document of a command's answer."""

    bot_username: str

    @property
    @abstractmethod
    def bot(self) -> Bot: ...

    async def arrive(self, arrival: Arrival) -> Submission | None:
        submission = await super().arrive(arrival)
        if submission is not None and not submission.duplicate:
            origin = arrival.origin
            await send_document(
                self.bot,
                submission.command,
                private=origin.channel_id == origin.sender_id,
                user_id=int(origin.sender_id),
                bot_username=self.bot_username,
                say=functools.partial(self.say, origin),
            )
        return submission


async def send_document(
    bot: Bot,
    command: CommandReply | None,
    *,
    private: bool,
    user_id: int,
    bot_username: str,
    say: Callable[[str], Awaitable[None]],
) -> None:
    """Send `command`'s document, if it has one, to `user_id`'s private chat (`private`: the
    chat it was asked in); `say` answers in the chat where it was asked."""
    document = command.document if command is not None else None
    if document is None or command is None:
        return
    if len(document.data) > MAX_DOCUMENT_BYTES:
        await say(
            "The document is larger than Telegram takes (50 MB): download it with "
            "GET /v1/me/export or ask the operator."
        )
        return
    try:
        await bot.send_document(
            chat_id=user_id,
            document=document.data,
            filename=document.name,
            caption="Everything stored about you.",
        )
    except Forbidden:
        bot_name = f"@{bot_username}" if bot_username else "the bot"
        await say(
            f"I may not write to you privately yet: open a private chat with {bot_name}, "
            f"press Start, and send /{command.name} there."
        )
        return
    except TelegramError as exc:
        log.warning("telegram: the document was not sent", error=str(exc))
        await say(f"The document could not be sent ({exc}); try again later.")
        return
    if not private:
        await say("Sent to you in our private chat.")
