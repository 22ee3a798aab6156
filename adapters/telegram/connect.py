"""Connecting the Telegram adapter: one attempt, made again (adapters/reconnect.py) while
Telegram cannot be reached."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol

from telegram import Bot
from telegram.error import Forbidden, InvalidToken, TelegramError
from telegram.ext import Application

from adapters.telegram.place import Chats
from gateway.adapter import Sink
from gateway.leadership import Leadership
from gateway.logs import get_logger
from gateway.runtime import Runtime

log = get_logger(__name__)


class Connecting(Sink, Protocol):
    """What connecting asks of the adapter."""

    name: str
    app: Application[Any, Any, Any, Any, Any, Any]
    runtime: Runtime
    chats: Chats
    polling: Leadership
    bot_id: int
    bot_username: str

    @property
    def bot(self) -> Bot: ...

    @property
    def webhook_mode(self) -> bool: ...

    async def clear_left_previews(self) -> object: ...


def refused_token(exc: BaseException) -> bool:
    """No retry helps a token Telegram refuses (401/404) or a bot it forbids."""
    return isinstance(exc, (InvalidToken, Forbidden))


async def connect(adapter: Connecting, updates: Sequence[str]) -> None:
    """One attempt at connecting `adapter`: who the bot is, its menu, its chats, then
    updates (polling, or the webhook set). Raises when Telegram could not be reached."""
    # Each step may be run again after a failed attempt: none of them is done twice.
    await adapter.app.initialize()
    me = adapter.bot
    adapter.bot_id = me.id
    adapter.bot_username = me.username or ""
    menu = [(c.name, c.summary) for c in adapter.runtime.commands.menu(adapter.name)]
    with contextlib.suppress(TelegramError):
        await me.set_my_commands(menu)
    await adapter.chats.load()
    await adapter.clear_left_previews()
    adapter.runtime.router.register_sink(adapter.name, adapter)
    if not adapter.app.running:
        await adapter.app.start()
    settings = adapter.runtime.settings
    if adapter.webhook_mode:
        secret = settings.telegram_webhook_secret
        await adapter.bot.set_webhook(
            settings.telegram_webhook_url,
            secret_token=secret.get_secret_value() if secret else None,
            allowed_updates=list(updates),
        )
        where = settings.telegram_webhook_url
    else:
        adapter.polling.begin()
        where = "long polling"
    log.info("adapter started", adapter=adapter.name, bot=adapter.bot_username, via=where)
