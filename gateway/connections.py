"""Platform connections, changed live: which bot token Telegram and Discord connect with, or
that one is off, kept in the archive by reference (`env:NAME`, `file:NAME`: never a token) so
an admin can connect a bot from the console, the API or `agenvoy connection`, and every
instance connects, reconnects or disconnects within seconds, without a restart.

A platform the archive says nothing about takes its token from the environment
(`AGENVOY_TELEGRAM_TOKEN`, `AGENVOY_DISCORD_TOKEN`), so an existing `.env` keeps working.
Which front-end code runs for a platform is the composition root's (gateway/platforms.py):
this module only says which token each platform should be connected with now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pydantic import SecretStr

from gateway.clock import Clock
from gateway.logs import get_logger
from gateway.profiles.keys import KeyUnavailable, resolve_key
from gateway.profiles.spec import KEY_REFERENCE, looks_like_key
from gateway.settings import Settings, TelegramMode
from gateway.store.connections import Connection, ConnectionStore

log = get_logger(__name__)

PLATFORMS: Final = ("telegram", "discord")
ENVIRONMENT: Final = {"telegram": "AGENVOY_TELEGRAM_TOKEN", "discord": "AGENVOY_DISCORD_TOKEN"}


class ConnectionInvalid(ValueError):
    """A change refused; the message names the field (never repeats a token)."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a platform should be connected with now, and where that comes from."""

    platform: str
    token: str | None  # None: not connected
    source: str  # "environment", "env:NAME" / "file:NAME", "off", "not configured"
    problem: str = ""  # why a configured reference gives no token


@dataclass(frozen=True, slots=True)
class ConnectionView:
    platform: str
    configured: Connection | None  # None: the environment's
    wanted: Wanted


def env_token(settings: Settings, platform: str) -> str | None:
    """The platform's token in the environment's settings (None: none)."""
    secret: SecretStr | None = getattr(settings, f"{platform}_token", None)
    value = secret.get_secret_value() if secret is not None else ""
    return value or None


def live(settings: Settings, platform: str) -> bool:
    """Whether the platform's connection follows the archive: Telegram's webhook is set up
    with the HTTP server's routes, at start, so a webhook gateway keeps its environment's."""
    return not (platform == "telegram" and settings.telegram_mode is TelegramMode.webhook)


class Connections:
    def __init__(self, store: ConnectionStore, settings: Settings, clock: Clock) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        # Called after a change made here, so this instance applies it at once (the others
        # find it at their next check).
        self.on_change: list[Callable[[], None]] = []
        # What the front-end that serves each platform here says of it (gateway/platforms.py).
        self.states: dict[str, str] = {}

    def state(self, platform: str) -> str:
        return self.states.get(platform, "not connected")

    async def wanted(self) -> dict[str, Wanted]:
        stored = await self.store.all()
        return {p: await self._wanted(p, stored.get(p)) for p in PLATFORMS}

    async def views(self) -> list[ConnectionView]:
        stored = await self.store.all()
        return [
            ConnectionView(p, stored.get(p), await self._wanted(p, stored.get(p)))
            for p in PLATFORMS
        ]

    async def _wanted(self, platform: str, row: Connection | None) -> Wanted:
        if row is None or not live(self.settings, platform):
            token = env_token(self.settings, platform)
            source = "environment" if token else "not configured"
            return Wanted(platform, token, source)
        if not row.enabled:
            return Wanted(platform, None, "off")
        try:
            token = await asyncio.to_thread(resolve_key, row.token, self.settings.secrets_path)
            if token is None:
                raise KeyUnavailable("no reference")
        except KeyUnavailable as exc:
            return Wanted(platform, None, row.token, str(exc))
        return Wanted(platform, token, row.token)

    async def put(self, platform: str, token: str, enabled: bool, *, by: str) -> Connection:
        """Connect `platform` with the token `token` names (or keep it off)."""
        self._check(platform)
        token = token.strip()
        if looks_like_key(token):
            raise ConnectionInvalid(
                "token: this looks like a token itself; keep it in the environment or the "
                "secrets file and give env:NAME or file:NAME"
            )
        if not KEY_REFERENCE.fullmatch(token):
            raise ConnectionInvalid(
                "token: env:NAME or file:NAME, naming where the token is kept (a token itself "
                "is never stored)"
            )
        made = await self.store.put(platform, token, enabled, by=by, at=self.clock.now_ms())
        self.changed()
        return made

    async def reset(self, platform: str, *, by: str) -> bool:
        """Forget the platform's connection: the environment's token again."""
        self._check(platform)
        gone = await self.store.remove(platform, by=by, at=self.clock.now_ms())
        self.changed()
        return gone

    def _check(self, platform: str) -> None:
        if platform not in PLATFORMS:
            raise ConnectionInvalid(f"platform: one of {', '.join(PLATFORMS)}")
        if not live(self.settings, platform):
            raise ConnectionInvalid(
                "platform: Telegram in webhook mode keeps the environment's token "
                "(AGENVOY_TELEGRAM_MODE=polling connects live)"
            )

    def changed(self) -> None:
        """A change was made here: apply it now rather than at the next check."""
        for hook in self.on_change:
            hook()
