"""Messages posted on Discord while the gateway was away are read when it is back: a real
gateway process is SIGKILLed, people write meanwhile (the fake Discord keeps the messages, and
no new gateway session gets them as events), and the restarted gateway archives and answers
each once, in the order they were posted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import Backends
from discord_rig import ANN, GENERAL, GUILD, contents, general_only, reply_in, running
from fakes.discord import FakeDiscord, text_channel
from gateway_proc import Gateway, free_port
from support import wait_until

from gateway.settings import Settings
from gateway.store.sessions import SessionStore

pytestmark = pytest.mark.slow

SESSION = f"dc-{GENERAL}"
LATE = re.compile(
    r"\n\[posted \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC while the gateway was away; read late\]$"
)
MISSED = [f"while you were out {n}" for n in range(1, 6)]


async def user_messages(home: Path, env: dict[str, str]) -> list[str]:
    """The session's user messages as archived, each once and answered once."""
    settings = Settings(home=home, database_url=env.get("AGENVOY_DATABASE_URL", ""), _env_file=None)
    store = await SessionStore.open(settings)
    try:
        archived = await store.recent_messages(SESSION, 100)
        tasks = [m.task_hash for m in archived if m.role == "user"]
        replies = [m.task_hash for m in archived if m.role == "assistant"]
        assert len(tasks) == len(set(tasks)), "a message was archived twice"
        assert sorted(replies) == sorted(tasks), "not every message answered exactly once"
        assert await store.unfinished() == []
        return [m.content for m in archived if m.role == "user"]
    finally:
        await store.close()


def caught_up(gateway: Gateway) -> list[dict[str, object]]:
    return [e for e in gateway.log if e.get("event") == "discord caught up"]


async def test_messages_posted_while_the_gateway_was_killed_are_answered_once_in_order(
    tmp_path: Path, backends: Backends
) -> None:
    env = await backends.new()
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[ANN])
        gateway = Gateway(
            tmp_path / "home",
            free_port(),
            **env,
            AGENVOY_DISCORD_TOKEN=fake.token,
            AGENVOY_DISCORD_API_URL=fake.api_base,
            AGENVOY_DISCORD_GATEWAY_URL=fake.gateway_url,
        )
        try:
            await gateway.start()
            fake.inject_message(GENERAL, ANN, "hello", mentions_bot=True)
            await reply_in(fake, GENERAL, "echo: hello", 20)
            await gateway.kill()
            for text in MISSED:
                fake.inject_message(GENERAL, ANN, text, mentions_bot=True)

            await gateway.start()
            await reply_in(fake, GENERAL, f"echo: {MISSED[-1]}", 30)
            await gateway.stop()
            answered = [c for c in contents(fake, GENERAL) if c.startswith("echo: ")]
            assert [LATE.sub("", c) for c in answered] == [f"echo: {t}" for t in ["hello", *MISSED]]
            archived = await user_messages(gateway.home, env)
            assert archived[0] == "hello"
            assert [LATE.sub("", m) for m in archived[1:]] == MISSED
            assert all(LATE.search(m) for m in archived[1:]), archived

            # Started again: nothing new was posted, nothing is taken twice.
            sent = len(fake.sent_messages(GENERAL))

            async def read_again() -> bool:
                return bool(caught_up(gateway))

            await gateway.start()
            assert await wait_until(read_again, 20)
            await gateway.stop()
            assert caught_up(gateway)[-1]["messages"] == 0
            assert len(fake.sent_messages(GENERAL)) == sent
            assert await user_messages(gateway.home, env) == archived
        finally:
            await gateway.close()


async def test_reading_is_bounded_per_channel_and_by_age(tmp_path: Path) -> None:
    """At most `discord_catch_up_messages` of a channel's messages, the oldest first, as the
    real API pages with `after`; none older than `discord_catch_up_max_age_seconds`."""
    home = tmp_path / "home"
    async with general_only() as fake:
        async with running(fake, home) as rig:
            fake.inject_message(GENERAL, ANN, "first", mentions_bot=True)
            await reply_in(fake, GENERAL, "echo: first")
            store = rig.runtime.store
        for n in range(1, 6):
            fake.inject_message(GENERAL, ANN, f"gap {n}", mentions_bot=True)
        # Four of the channel's messages: the bot's own reply to "first" counts, as it does in
        # what Discord hands out.
        async with running(fake, home, discord_catch_up_messages=4) as rig:
            await reply_in(fake, GENERAL, "echo: gap 3")
            store = rig.runtime.store

            async def three_answered() -> bool:
                messages = await store.recent_messages(SESSION, 50)
                return sum(m.role == "assistant" for m in messages) == 4

            assert await wait_until(three_answered, 10)
            texts = [
                m.content for m in await store.recent_messages(SESSION, 50) if m.role == "user"
            ]
        assert [LATE.sub("", t) for t in texts] == ["first", "gap 1", "gap 2", "gap 3"]
        fake.inject_message(GENERAL, ANN, "too old", mentions_bot=True)
        async with running(fake, home, discord_catch_up_max_age_seconds=0) as rig:
            fake.inject_message(GENERAL, ANN, "live", mentions_bot=True)
            await reply_in(fake, GENERAL, "echo: live")
            texts = [m.content for m in await rig.runtime.store.recent_messages(SESSION, 50)]
        assert not any("too old" in t for t in texts)


async def test_messages_missed_by_a_session_that_could_not_resume_are_read(
    tmp_path: Path,
) -> None:
    async with general_only() as fake:
        async with running(fake, tmp_path / "home") as rig:
            fake.inject_message(GENERAL, ANN, "before", mentions_bot=True)
            await reply_in(fake, GENERAL, "echo: before")
            fake.forget_sessions()
            fake.inject_message(GENERAL, ANN, "during the gap", mentions_bot=True)
            await fake.disconnect(4000)  # the client tries to resume, is refused, identifies
            await reply_in(fake, GENERAL, "echo: during the gap")
            texts = [m.content for m in await rig.runtime.store.recent_messages(SESSION, 50)]
        assert LATE.search(texts[2]) and texts[2].startswith("during the gap")
