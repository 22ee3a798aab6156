"""Schedules through the chat front-ends: made in a Telegram group by an admin, fired into
that group at the test's clock, once across a restart; a reminder in a Discord channel."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from clock import FakeClock
from discord_rig import ANN as DC_ANN
from discord_rig import GENERAL, GUILD
from discord_rig import contents as discord_contents
from discord_rig import reply_in as discord_reply_in
from discord_rig import running as discord_running
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel
from fakes.telegram import FakeTelegram
from telegram_rig import Rig, reply_in, sent_to, start_rig, stop_rig

HOUR = 3600.0
GROUP = -100
ROOT, BOB = 11, 12


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


async def started(fake: FakeTelegram, home: Path, clock: FakeClock) -> Rig:
    return await start_rig(fake, home, clock=clock, admins=f"telegram:{ROOT}")


def echoes(fake: FakeTelegram) -> list[dict[str, object]]:
    return [m for m in fake.sent_messages(GROUP) if str(m.get("text", "")).startswith("echo:")]


async def test_a_schedule_fires_into_a_telegram_group_once_across_a_restart(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    home, clock = tmp_path / "home", FakeClock()
    group = fake.group(GROUP, "team")
    root, bob = fake.user(ROOT, "Root"), fake.user(BOB, "Bob")
    rig = await started(fake, home, clock)
    try:
        fake.inject_message(group, bob, "/schedule every 1h nag everyone")
        await reply_in(fake, GROUP, "only an admin may use /schedule")
        fake.inject_message(group, root, "/schedule every 1h post the daily summary")
        await reply_in(fake, GROUP, "schedule #1: every 1h")
        await clock.advance(HOUR)
        assert await rig.runtime.schedules.fire_due() == 1
        posted = await reply_in(fake, GROUP, "echo: post the daily summary")
        assert "reply_parameters" not in posted  # nothing to answer: a post of its own
        fake.inject_message(group, bob, "/schedules")
        await reply_in(fake, GROUP, "#1  every 1h (UTC)")
    finally:
        await stop_rig(rig)
    # Started again at the same time: that due time has fired.
    rig = await started(fake, home, clock)
    try:
        assert await rig.runtime.schedules.fire_due() == 0
        await clock.advance(HOUR)
        assert await rig.runtime.schedules.fire_due() == 1
        await reply_in(fake, GROUP, "echo: post the daily summary")
        await rig.runtime.engine.courier.redeliver()
        assert [m["text"] for m in echoes(fake)] == ["echo: post the daily summary"] * 2
        stored = await rig.runtime.store.recent_messages(f"tg-{GROUP}", 100)
        ran = [m.sender for m in stored if m.content == "post the daily summary"]
        assert ran == ["schedule #1", "schedule #1"]
        fake.inject_message(group, bob, "/unschedule 1")
        await reply_in(fake, GROUP, "only an admin may use /unschedule")
        fake.inject_message(group, root, "/unschedule 1")
        await reply_in(fake, GROUP, "schedule #1 removed")
        await clock.advance(HOUR)
        assert await rig.runtime.schedules.fire_due() == 0
    finally:
        await stop_rig(rig)
    assert "echo: nag everyone" not in sent_to(fake, GROUP)


async def test_a_schedule_in_a_forum_topic_answers_in_that_topic(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    clock = FakeClock()
    forum = fake.supergroup(-300, "forum", is_forum=True)
    rig = await started(fake, tmp_path / "home", clock)
    try:
        fake.inject_message(
            forum, fake.user(ROOT, "Root"), "/schedule @hourly standup", thread_id=7
        )
        await reply_in(fake, -300, "schedule #1: @hourly")
        await clock.advance(HOUR)
        assert await rig.runtime.schedules.fire_due() == 1
        posted = await reply_in(fake, -300, "echo: standup")
        assert posted.get("message_thread_id") == 7
    finally:
        await stop_rig(rig)


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        server.add_guild(
            GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[DC_ANN]
        )
        yield server


@pytest.fixture
def pointed(discord_fake: FakeDiscord) -> Iterator[None]:
    with point_discord_py_at(discord_fake):
        yield


async def test_a_reminder_goes_to_its_discord_channel(
    discord_fake: FakeDiscord, pointed: None, tmp_path: Path
) -> None:
    clock = FakeClock()
    admins = f"discord:{DC_ANN['id']}"
    async with discord_running(discord_fake, tmp_path / "home", clock=clock, admins=admins) as rig:
        discord_fake.inject_message(
            GENERAL, DC_ANN, "/schedule every 30m stretch your legs", mentions_bot=True
        )
        await discord_reply_in(discord_fake, GENERAL, "schedule #1: every 30m")
        await clock.advance(HOUR / 2)
        assert await rig.runtime.schedules.fire_due() == 1
        await discord_reply_in(discord_fake, GENERAL, "echo: stretch your legs")
        said = discord_contents(discord_fake, GENERAL)
        assert said.count("echo: stretch your legs") == 1
