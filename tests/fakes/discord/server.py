"""``FakeDiscord``, the server that ties the gateway, REST, interactions and commands
together, and the switch that points discord.py at it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import discord
import discord.gateway
import discord.http
import yarl
from aiohttp import web

from .commands import DiscordCommands
from .gateway import PRIVILEGED_INTENTS
from .payloads import ATTACHMENT_SIZE_LIMIT, member, role, text_channel, thread, user

DEFAULT_TOKEN = "fake-bot-token.agenvoy.test"
DEFAULT_BOT_ID = 1_100_000_000_000_000_001


class FakeDiscord(DiscordCommands):
    """A fake Discord REST API and gateway on ``127.0.0.1``; see the package docstring."""

    text_channel = staticmethod(text_channel)
    thread = staticmethod(thread)
    user = staticmethod(user)
    role = staticmethod(role)
    member = staticmethod(member)

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        bot_id: int = DEFAULT_BOT_ID,
        bot_username: str = "agenvoy-test",
        application_id: int | None = None,
        heartbeat_interval: int = 41_250,
        enabled_intents: int = PRIVILEGED_INTENTS,
        interaction_timeout: float | None = None,
    ) -> None:
        """``heartbeat_interval`` is in milliseconds. ``enabled_intents`` are the privileged
        intents switched on "in the developer portal": asking for others closes with 4014.
        ``interaction_timeout`` (seconds, None = never) makes late first responses 10062.
        """
        super().__init__()
        self.token = token
        self.bot_user = user(bot_id, bot_username, bot=True)
        self.bot_user["global_name"] = None
        self.application_id = str(application_id or bot_id)
        self.heartbeat_interval = heartbeat_interval
        self.enabled_intents = enabled_intents
        self.interaction_timeout = interaction_timeout
        self._users[self.bot_id] = self.bot_user

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=ATTACHMENT_SIZE_LIMIT + 1024 * 1024)
        app.router.add_get("/gateway", self._handle_ws)
        app.router.add_get("/gateway/", self._handle_ws)
        app.router.add_get("/attachments/{cid}/{aid}/{filename}", self._handle_attachment)
        app.router.add_route("*", "/api/v10{tail:.*}", self._handle_api)
        app.router.add_route("*", "/{tail:.*}", self._handle_not_found)
        return app

    async def _stopping(self) -> None:
        await self.disconnect(1001)


@contextlib.contextmanager
def point_discord_py_at(fake: FakeDiscord) -> Iterator[FakeDiscord]:
    """Route discord.py's REST and gateway to ``fake`` while the block runs.

    Sets ``discord.http.Route.BASE`` and ``DiscordWebSocket.DEFAULT_GATEWAY``; both are
    restored on exit. Routes read ``BASE`` when they are built, so build the client inside.
    """
    old_base = discord.http.Route.BASE
    old_gateway = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    discord.http.Route.BASE = fake.api_base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway_url)
    try:
        yield fake
    finally:
        discord.http.Route.BASE = old_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = old_gateway
