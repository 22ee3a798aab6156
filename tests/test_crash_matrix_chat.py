"""The crash matrix through Telegram and Discord: a real gateway with the platform adapter, in
a process of its own, kills itself at a named step while the fake platform server (in this
process) keeps its state; started again, the platform's view and the archive must agree:
every message answered once, an approval standing, nothing left unfinished.

What the Bot API cannot prevent is checked as documented: a reply part Telegram accepted just
before the crash goes out once more, marked with "↻ ".
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path

import pytest
from conftest import Backends
from discord_rig import ANN as DISCORD_ANN
from discord_rig import GENERAL, GUILD, custom_ids, prompt_in
from discord_rig import contents as discord_contents
from discord_rig import reply_in as discord_reply_in
from fakes.discord import FakeDiscord, text_channel
from fakes.telegram import FakeTelegram
from gateway_proc import Gateway, free_port
from support import wait_until
from telegram_rig import reply_in as telegram_reply_in
from telegram_rig import sent_to

from gateway.settings import Settings
from gateway.store.sessions import SessionStore

pytestmark = pytest.mark.slow

CHAT = 301
# Four gateways restart at once here (and with PostgreSQL, on a shared machine): a reply
# after a restart may take longer than the rigs' usual wait. Only a failure waits it out.
AFTER_RESTART = 30.0


async def archive_of(home: Path, env: dict[str, str], session_id: str) -> list[tuple[str, str]]:
    """The session as the archive has it, checked for what a crash must never leave."""
    url = env.get("AGENVOY_DATABASE_URL", "")
    settings = Settings(home=home, database_url=url, _env_file=None)
    async with OPENING.get():  # alembic migrates through module-level state
        store = await SessionStore.open(settings)
    try:
        archived = await store.recent_messages(session_id, 100)
        tasks = [m.task_hash for m in archived if m.role == "user" and m.task_hash]
        replies = [m.task_hash for m in archived if m.role == "assistant"]
        assert len(tasks) == len(set(tasks)), "a message was archived twice"
        assert len(replies) == len(set(replies)), "a task was answered twice"
        assert await store.unfinished() == []
        history = store.files(session_id).history.read()
        assert [(m.id, m.content) for m in history] == [(m.id, m.content) for m in archived]
        # A reply the platform has seen has its lines in the audit trail.
        done = {r.task_hash for r in store.files(session_id).action_log.read() if r.kind == "done"}
        assert not set(replies) - done, "a reply with no done line in action.log"
        return [(m.role, m.content) for m in archived]
    finally:
        await store.close()


OPENING: contextvars.ContextVar[asyncio.Lock] = contextvars.ContextVar("opening")


async def prompt_recorded_as_sent(home: Path, env: dict[str, str]) -> None:
    """Wait until the gateway has recorded its prompt as delivered. A crash between the
    platform taking a message and that record sends it again (the documented window); these
    scenarios crash later, at the answer, so the answer waits for the record."""
    url = env.get("AGENVOY_DATABASE_URL", "")
    settings = Settings(home=home, database_url=url, _env_file=None)
    async with OPENING.get():
        store = await SessionStore.open(settings)
    try:

        async def sent() -> bool:
            return await store.outbox.undelivered() == []

        assert await wait_until(sent, 10), "the prompt was never recorded as delivered"
    finally:
        await store.close()


# -- Telegram --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def telegram_gateway(
    home: Path, env: dict[str, str], step: str
) -> AsyncIterator[tuple[Gateway, FakeTelegram]]:
    async with FakeTelegram() as fake:
        gateway = Gateway(
            home,
            free_port(),
            **env,
            AGENVOY_TELEGRAM_TOKEN=fake.token,
            AGENVOY_TELEGRAM_API_URL=fake.url,
            NO_PROXY="127.0.0.1,localhost",
        )
        await gateway.start(AGENVOY_CRASH_AT=step)
        try:
            yield gateway, fake
        finally:
            await gateway.close()


async def telegram_says(
    home: Path, env: dict[str, str], step: str, text: str, expected: list[str]
) -> None:
    """Ann writes `text`; the gateway dies at `step`; once it is back, Telegram has seen
    exactly `expected` from the bot and the archive holds the text and its one reply."""
    async with telegram_gateway(home, env, step) as (gateway, fake):
        fake.inject_message(fake.private_chat(CHAT), fake.user(CHAT, "Ann"), text)
        assert await gateway.died() == -9
        await gateway.start()
        await telegram_reply_in(fake, CHAT, expected[-1], AFTER_RESTART)
        await gateway.stop()
        assert sent_to(fake, CHAT) == expected
    archived = await archive_of(home, env, f"tg-{CHAT}")
    assert archived == [("user", text), ("assistant", expected[0].removeprefix("↻ "))]


async def telegram_approval_stands(home: Path, env: dict[str, str]) -> None:
    async with telegram_gateway(home, env, "answered") as (gateway, fake):
        ann = fake.user(CHAT, "Ann")
        fake.inject_message(fake.private_chat(CHAT), ann, "!confirm launch")
        await fake.wait_for_call("sendMessage", lambda p: "reply_markup" in p, timeout=15)
        prompt = next(m for m in fake.sent_messages(CHAT) if m.get("reply_markup"))
        approve = prompt["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        await prompt_recorded_as_sent(home, env)
        fake.inject_callback(ann, prompt, approve)
        assert await gateway.died() == -9  # the approval is journaled, not yet acknowledged
        await gateway.start()
        await telegram_reply_in(fake, CHAT, "approved: launch", AFTER_RESTART)
        await gateway.stop()
        prompts = [m for m in fake.sent_messages(CHAT) if m.get("reply_markup")]
        assert len(prompts) == 1  # not asked again
        assert [t for t in sent_to(fake, CHAT) if "launch" in t and "🔐" not in t] == [
            "approved: launch"
        ]
    archived = await archive_of(home, env, f"tg-{CHAT}")
    assert archived == [("user", "!confirm launch"), ("assistant", "approved: launch")]


Scenario = Callable[[Path, dict[str, str]], Awaitable[None]]
ONCE = ["echo: hello"]

TELEGRAM: dict[str, Scenario] = {
    # Not stored: the update was never confirmed, so Telegram delivers it again.
    "received": partial(telegram_says, step="received", text="hello", expected=ONCE),
    # Stored, not confirmed: delivered again, stored once (update id), answered once.
    "stored": partial(telegram_says, step="stored", text="hello", expected=ONCE),
    # The reply recorded, not sent: the outbox sends it once after the restart.
    "recorded": partial(telegram_says, step="recorded", text="hello", expected=ONCE),
    # Telegram took the reply, the outbox never heard: sent again, marked as a repeat.
    "part_sent": partial(
        telegram_says, step="part_sent", text="hello", expected=[*ONCE, "↻ echo: hello"]
    ),
    "answered": telegram_approval_stands,
}


# -- Discord ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def discord_gateway(
    home: Path, env: dict[str, str], step: str
) -> AsyncIterator[tuple[Gateway, FakeDiscord]]:
    async with FakeDiscord() as fake:
        fake.add_guild(
            GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[DISCORD_ANN]
        )
        gateway = Gateway(
            home,
            free_port(),
            **env,
            AGENVOY_DISCORD_TOKEN=fake.token,
            AGENVOY_DISCORD_API_URL=fake.api_base,
            AGENVOY_DISCORD_GATEWAY_URL=fake.gateway_url,
        )
        await gateway.start(AGENVOY_CRASH_AT=step)
        try:
            yield gateway, fake
        finally:
            await gateway.close()


async def discord_says(home: Path, env: dict[str, str], step: str) -> None:
    async with discord_gateway(home, env, step) as (gateway, fake):
        fake.inject_message(GENERAL, DISCORD_ANN, "hello", mentions_bot=True)
        assert await gateway.died() == -9
        await gateway.start()
        await discord_reply_in(fake, GENERAL, "echo: hello", AFTER_RESTART)
        await gateway.stop()
        # A part sent again after a crash carries the same nonce: Discord keeps one message.
        assert [c for c in discord_contents(fake, GENERAL) if c] == ["echo: hello"]
    archived = await archive_of(home, env, f"dc-{GENERAL}")
    assert archived == [("user", "hello"), ("assistant", "echo: hello")]


async def discord_approval_stands(home: Path, env: dict[str, str]) -> None:
    async with discord_gateway(home, env, "answered") as (gateway, fake):
        fake.inject_message(GENERAL, DISCORD_ANN, "!confirm launch", mentions_bot=True)
        prompt = await prompt_in(fake, GENERAL)
        approve = next(cid for cid in custom_ids(prompt) if cid.endswith(":y"))
        await prompt_recorded_as_sent(home, env)
        fake.inject_component(DISCORD_ANN, prompt, approve)
        assert await gateway.died() == -9
        await gateway.start()
        await discord_reply_in(fake, GENERAL, "approved: launch", AFTER_RESTART)
        await gateway.stop()
        prompts = [m for m in fake.sent_messages(GENERAL) if m.get("components")]
        assert len(prompts) == 1  # not asked again
    archived = await archive_of(home, env, f"dc-{GENERAL}")
    assert archived == [("user", "!confirm launch"), ("assistant", "approved: launch")]


DISCORD: dict[str, Scenario] = {
    "stored": partial(discord_says, step="stored"),
    "recorded": partial(discord_says, step="recorded"),
    "part_sent": partial(discord_says, step="part_sent"),
    "answered": discord_approval_stands,
}


async def all_at_once(
    tmp_path: Path, backends: Backends, scenarios: dict[str, Scenario]
) -> dict[str, str]:
    OPENING.set(asyncio.Lock())
    stores = [await backends.new() for _ in scenarios]
    outcomes = await asyncio.gather(
        *(
            scenario(tmp_path / step, env)
            for (step, scenario), env in zip(scenarios.items(), stores, strict=True)
        ),
        return_exceptions=True,
    )
    return {
        step: repr(outcome)
        for step, outcome in zip(scenarios, outcomes, strict=True)
        if isinstance(outcome, BaseException)
    }


# Every step kills a gateway and starts it again: 100-115 s beside the rest of the suite on two
# busy cores, and past the suite's 120 s limit on a slower day (as the HTTP matrix was).
@pytest.mark.timeout(300)
async def test_killed_at_every_step_through_telegram(tmp_path: Path, backends: Backends) -> None:
    assert await all_at_once(tmp_path, backends, TELEGRAM) == {}


@pytest.mark.timeout(300)
async def test_killed_at_every_step_through_discord(tmp_path: Path, backends: Backends) -> None:
    assert await all_at_once(tmp_path, backends, DISCORD) == {}
