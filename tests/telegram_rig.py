"""A Telegram adapter on a whole gateway, against the fake Bot API: what the Telegram tests
share."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakes.telegram import FakeTelegram

from adapters.telegram import TelegramAdapter
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.runtime import Runtime
from gateway.settings import Settings

os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
os.environ.setdefault("PTB_TIMEDELTA", "1")  # opt in to 22.x's future RetryAfter type


@dataclass
class Rig:
    fake: FakeTelegram
    runtime: Runtime
    adapter: TelegramAdapter


async def start_rig(
    fake: FakeTelegram, home: Path, *, clock: Clock = SYSTEM_CLOCK, **extra: Any
) -> Rig:
    settings = Settings(
        home=home,
        telegram_token=fake.token,
        telegram_api_url=fake.url,
        confirm_timeout_seconds=30,
        _env_file=None,
        **extra,
    )
    runtime = await Runtime.start(settings, clock=clock)
    runtime.engine.courier.initial_wait = 0.01
    adapter = TelegramAdapter.build(runtime)
    adapter.poller.initial_wait = 0.01
    await asyncio.wait_for(adapter.start(poll_timeout=1), 10)
    return Rig(fake, runtime, adapter)


@contextlib.asynccontextmanager
async def running(fake: FakeTelegram, home: Path, **options: Any) -> AsyncIterator[Rig]:
    """A rig for the length of a `with` block."""
    rig = await start_rig(fake, home, **options)
    try:
        yield rig
    finally:
        await stop_rig(rig)


async def stop_rig(rig: Rig) -> None:
    await asyncio.wait_for(rig.adapter.stop(), 10)
    await rig.runtime.close()


async def last_task_of(rig: Rig, session_id: str) -> str:
    """The task of the session's latest message to the bot, as the archive records it."""
    messages = await rig.runtime.store.recent_messages(session_id, 50)
    return next(m.task_hash for m in reversed(messages) if m.role == "user" and m.task_hash)


def sent_to(fake: FakeTelegram, chat_id: int) -> list[str]:
    return [m.get("text", "") for m in fake.sent_messages(chat_id)]


async def reply_in(
    fake: FakeTelegram, chat_id: int, contains: str, within: float = 10
) -> dict[str, Any]:
    return await fake.wait_for_call(
        "sendMessage",
        lambda p: p.get("chat_id") == chat_id and contains in str(p.get("text", "")),
        timeout=within,
    )
