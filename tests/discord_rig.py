"""A Discord adapter on a whole gateway, against the fake Discord: what the Discord tests
share."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakes.discord import FakeDiscord, point_discord_py_at, text_channel, user

from adapters.discord.adapter import DiscordAdapter
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.runtime import Runtime
from gateway.settings import Settings

GUILD, GENERAL, THREAD, DM = 900, 901, 902, 903
ANN = user(11, "ann")
BOB = user(12, "bob")
INTERACTION_CALLBACK = "POST /interactions/{id}/{token}/callback"


@dataclass
class Rig:
    fake: FakeDiscord
    runtime: Runtime
    adapter: DiscordAdapter


async def start_rig(
    fake: FakeDiscord, home: Path, *, clock: Clock = SYSTEM_CLOCK, **extra: Any
) -> Rig:
    # The rigs serve DMs unless a test says otherwise (the setting's default is off).
    extra = {"discord_allow_dms": True, **extra}
    settings = Settings(
        home=home,
        **extra,
        discord_token=fake.token,
        discord_api_url=fake.api_base,
        discord_gateway_url=fake.gateway_url,
        confirm_timeout_seconds=30,
        _env_file=None,
    )
    runtime = await Runtime.start(settings, clock=clock)
    runtime.engine.courier.initial_wait = 0.01
    adapter = DiscordAdapter(runtime, guild_ready_timeout=0.05)
    await adapter.start(ready_timeout=10)
    return Rig(fake, runtime, adapter)


@contextlib.asynccontextmanager
async def running(fake: FakeDiscord, home: Path, **options: Any) -> AsyncIterator[Rig]:
    """A rig for the length of a `with` block."""
    rig = await start_rig(fake, home, **options)
    try:
        yield rig
    finally:
        await stop_rig(rig)


async def stop_rig(rig: Rig) -> None:
    await rig.adapter.stop()
    await rig.runtime.close()


@contextlib.asynccontextmanager
async def general_only() -> AsyncIterator[FakeDiscord]:
    """The fake Discord with one guild, its #general and Ann, and discord.py pointed at it."""
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[ANN])
        with point_discord_py_at(fake):
            yield fake


async def reply_in(
    fake: FakeDiscord, channel: int, contains: str, within: float = 10
) -> dict[str, Any]:
    return await fake.wait_for_call(
        f"POST /channels/{channel}/messages",
        lambda body: contains in str(body.get("content", "")),
        timeout=within,
    )


def contents(fake: FakeDiscord, channel: int) -> list[str]:
    return [str(m.get("content", "")) for m in fake.sent_messages(channel)]


async def prompt_in(fake: FakeDiscord, channel: int) -> dict[str, Any]:
    body = await fake.wait_for_call(
        f"POST /channels/{channel}/messages", lambda b: bool(b.get("components")), timeout=10
    )
    return fake.sent_messages(channel)[-1] if body else body


def custom_ids(message: dict[str, Any]) -> list[str]:
    return [c["custom_id"] for row in message["components"] for c in row["components"]]
