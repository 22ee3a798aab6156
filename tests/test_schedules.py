"""Schedules: specs and their due times, `/schedule` and friends with the authorization rule,
firing each due time once (a crash between storing the task and moving the schedule on
included), and what a missed due time does — all on a clock the test moves."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from clock import START_MS, FakeClock
from engine_rig import Core, Engine, EngineRig

from gateway.crash import CrashPoints
from gateway.engine.errors import TaskNotFound
from gateway.events import Inbound, Origin
from gateway.schedule_spec import BadSchedule, parse_args, parse_spec, parse_zone
from gateway.schedules import home_origin

MINUTE = 60.0
HOUR = 3600.0
ANN = Origin("terminal", sender_id="ann", sender_name="Ann", window_hash="w-ann")
ADMIN = Origin("telegram", channel_id="-100", sender_id="1", sender_name="Root")
BOB = Origin("telegram", channel_id="-100", sender_id="2", sender_name="Bob")

pytestmark = pytest.mark.fast


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


# -- specs ------------------------------------------------------------------------------------


def test_an_interval_keeps_its_phase_and_skips_what_passed() -> None:
    spec = parse_spec("every 30m")
    assert spec.text == "every 30m" and spec.interval_ms == 30 * 60_000
    zone = parse_zone("UTC")
    assert spec.next_after(1_000, zone) == 1_000 + 1_800_000
    # Three and a half intervals late: the next one after now, in step with the old times.
    due = 10_000_000
    assert spec.next_after(due + 3 * 1_800_000 + 5, zone, due_ms=due) == due + 4 * 1_800_000
    assert parse_spec("every 2 h").text == "every 2h"
    assert parse_spec("EVERY 1D").interval_ms == 86_400_000


def test_cron_specs_are_read_in_their_time_zone() -> None:
    daily = parse_spec("0 9 * * *")
    after = ms("2026-07-01T12:00:00+00:00")
    assert daily.next_after(after, parse_zone("UTC")) == ms("2026-07-02T09:00:00+00:00")
    # 09:00 in Paris in July is 07:00 UTC.
    assert daily.next_after(after, parse_zone("Europe/Paris")) == ms("2026-07-02T07:00:00+00:00")
    weekdays = parse_spec("30 8 * * 1-5")
    friday = ms("2026-07-03T09:00:00+00:00")
    assert weekdays.next_after(friday, parse_zone("UTC")) == ms("2026-07-06T08:30:00+00:00")
    assert parse_spec("@daily").cron == "0 0 * * *"
    assert parse_spec("@hourly").next_after(0, parse_zone("UTC")) == 3_600_000


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("61 * * * *", "not a cron expression"),
        ("* * *", "not a schedule"),
        ("every 30s", "between 1m and 366d"),
        ("every 0m", "between 1m and 366d"),
        ("every 400d", "between 1m and 366d"),
        ("every often", "a number and m, h or d"),
        ("@sometimes", "not a schedule"),
        ("0 0 30 2 *", "not a cron expression"),
        (",".join(["1"] * 120) + " * * * *", "at most 200 characters"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(spec: str, says: str) -> None:
    with pytest.raises(BadSchedule, match=says):
        parse_spec(spec)


def test_schedule_arguments() -> None:
    args = parse_args("0 9 * * 1-5 post the  daily summary")
    assert (args.spec.text, args.prompt, args.skip_missed) == (
        "0 9 * * 1-5",
        "post the  daily summary",
        False,
    )
    args = parse_args("--skip-missed --tz Europe/Paris every 30m check the build")
    assert (args.spec.text, args.prompt, args.skip_missed, args.timezone) == (
        "every 30m",
        "check the build",
        True,
        "Europe/Paris",
    )
    assert parse_args("every 2 h stretch").spec.text == "every 2h"
    assert parse_args("--tz=UTC @daily tidy up").prompt == "tidy up"
    for bad, says in [
        ("", "usage"),
        ("every 30m", "give a prompt"),
        ("--loud every 30m x", "unknown option"),
        ("0 9 * *", "not a schedule"),
    ]:
        with pytest.raises(BadSchedule, match=says):
            parse_args(bad)
    with pytest.raises(BadSchedule, match="unknown time zone"):
        parse_zone("Mars/Olympus")
    with pytest.raises(BadSchedule, match="unknown time zone"):
        parse_zone("../../etc/passwd")


def test_a_scheduled_task_answers_where_its_session_is() -> None:
    group = home_origin("tg--1001234", 7)
    assert (group.platform, group.channel_id, group.sender_id, group.reply_to) == (
        "telegram",
        "-1001234",
        "schedule:7",
        "",
    )
    assert home_origin("tg--100_42", 1).channel_id == "-100:42"  # a forum topic
    assert (home_origin("dc-555", 1).platform, home_origin("dc-555", 1).channel_id) == (
        "discord",
        "555",
    )
    assert home_origin("cli-x", 1).platform == "schedule"


# -- the engine on the test's clock -----------------------------------------------------------

ADMINS = "telegram:1"


@pytest.fixture
async def engine(engines: EngineRig) -> AsyncIterator[Engine]:
    async with engines.open(admins=ADMINS) as opened:
        yield opened


async def command(core: Core, who: Origin, session_id: str, text: str) -> tuple[bool, str]:
    submission = await core.router.submit(Inbound(who, session_id, text))
    assert submission.command is not None, text
    return submission.command.ok, submission.command.text


async def user_messages(engine: Engine, session_id: str) -> list[tuple[str, str]]:
    messages = await engine.store.recent_messages(session_id, 100)
    return [(m.sender, m.content) for m in messages if m.role == "user"]


async def settle(engine: Engine, session_id: str) -> list[str]:
    """Wait for every task of the session to end; the replies, oldest first. A task this
    engine does not know ended before it started (in an earlier life of the home)."""
    messages = await engine.store.recent_messages(session_id, 100)
    for m in messages:
        if m.role == "user" and m.task_hash:
            with contextlib.suppress(TaskNotFound):
                await engine.router.wait(m.task_hash, 10)
    messages = await engine.store.recent_messages(session_id, 100)
    return [m.content for m in messages if m.role == "assistant"]


async def test_a_schedule_fires_at_each_due_time_once(engine: Engine, clock: FakeClock) -> None:
    ok, said = await command(engine, ANN, "cli-s", "/schedule every 1h check the build")
    assert ok and said.startswith("schedule #1: every 1h (UTC), next ")
    schedules = engine.schedules
    assert await schedules.fire_due() == 0  # not due yet
    await clock.advance(HOUR - 1)
    assert await schedules.fire_due() == 0
    await clock.advance(1)
    assert await schedules.fire_due() == 1
    assert await schedules.fire_due() == 0  # that due time is done
    assert await settle(engine, "cli-s") == ["echo: check the build"]
    assert await user_messages(engine, "cli-s") == [("schedule #1", "check the build")]
    [made] = await schedules.of_session("cli-s")
    assert made.next_due_at == START_MS + 2 * 3_600_000
    assert made.last_fired_at == START_MS + 3_600_000
    assert made.created_by_id == "terminal:ann" and made.created_by_name == "Ann"
    await clock.advance(HOUR)
    assert await schedules.fire_due() == 1
    assert await settle(engine, "cli-s") == ["echo: check the build"] * 2


async def test_a_cron_schedule_fires_at_its_time_in_its_zone(
    engine: Engine, clock: FakeClock
) -> None:
    # START_MS is 2026-05-28 20:26:40 UTC: 22:26:40 in Paris; 23:00 Paris is 21:00 UTC.
    assert datetime.fromtimestamp(START_MS / 1000, UTC).isoformat().startswith("2026-05-28T20:26")
    ok, said = await command(
        engine, ANN, "cli-c", "/schedule --tz Europe/Paris 0 23 * * * wind down"
    )
    assert ok, said
    assert "next 2026-05-28 23:00 CEST" in said
    await clock.advance(33 * MINUTE + 19)
    assert await engine.schedules.fire_due() == 0
    await clock.advance(1)
    assert await engine.schedules.fire_due() == 1
    [made] = await engine.schedules.of_session("cli-c")
    assert made.next_due_at == ms("2026-05-29T21:00:00+00:00")


async def test_a_bad_schedule_is_refused_with_a_reason(engine: Engine) -> None:
    for text, says in [
        ("/schedule 0 25 * * * x", "not a cron expression"),
        ("/schedule every 5s x", "between 1m and 366d"),
        ("/schedule every 1h", "give a prompt"),
        ("/schedule every 1h /reset", "not a /command"),
        ("/schedule --tz Nowhere/Land every 1h x", "unknown time zone"),
        ("/unschedule two", "usage: /unschedule"),
        ("/unschedule ²", "usage: /unschedule"),
        ("/unschedule 99999999999999999999999", "usage: /unschedule"),
        ("/unschedule 3", "no schedule #3"),
    ]:
        ok, said = await command(engine, ANN, "cli-bad", text)
        assert not ok and says in said, (text, said)
    assert await engine.schedules.of_session("cli-bad") == []


async def test_shared_chats_schedule_for_admins_only(engine: Engine) -> None:
    sid = "tg--100"
    ok, said = await command(engine, BOB, sid, "/schedule every 1h nag everyone")
    assert not ok and said == "only an admin may use /schedule in a shared chat"
    ok, said = await command(engine, ADMIN, sid, "/schedule every 1h daily summary")
    assert ok, said
    ok, listed = await command(engine, BOB, sid, "/schedules")  # anyone may look
    assert (
        ok
        and listed.startswith("#1  every 1h (UTC)  next ")
        and "“daily summary” by Root" in listed
    )
    ok, said = await command(engine, BOB, sid, "/unschedule 1")
    assert not ok and "only an admin" in said
    ok, said = await command(engine, ADMIN, sid, "/unschedule 1")
    assert ok and said == "schedule #1 removed"
    assert (await command(engine, BOB, sid, "/schedules"))[1].startswith("no schedules here")
    # A private session is its user's: no admin needed.
    assert (await command(engine, ANN, "cli-mine", "/schedule every 1h x"))[0]


async def test_a_schedule_of_another_session_cannot_be_removed_here(engine: Engine) -> None:
    await command(engine, ANN, "cli-a", "/schedule every 1h a's")
    ok, said = await command(engine, ANN, "cli-b", "/unschedule 1")
    assert not ok and said == "no schedule #1 in this session"
    assert len(await engine.schedules.of_session("cli-a")) == 1


# -- missed due times ---------------------------------------------------------------------------


async def test_due_times_missed_while_down_run_once_on_start(
    engines: EngineRig, clock: FakeClock
) -> None:
    async with engines.open(admins=ADMINS) as engine:
        await command(engine, ANN, "cli-m", "/schedule every 1h catch up")
    await clock.advance(5 * HOUR + 10 * MINUTE)  # five due times pass with no gateway running
    async with engines.open(admins=ADMINS) as engine:
        assert await engine.schedules.fire_due() == 1
        assert await engine.schedules.fire_due() == 0
        assert await settle(engine, "cli-m") == ["echo: catch up"]
        [made] = await engine.schedules.of_session("cli-m")
        assert made.next_due_at == START_MS + 6 * 3_600_000  # in step, in the future


async def test_due_times_missed_while_down_are_skipped_if_the_schedule_says_so(
    engines: EngineRig, clock: FakeClock
) -> None:
    async with engines.open(admins=ADMINS) as engine:
        ok, said = await command(engine, ANN, "cli-k", "/schedule --skip-missed every 1h only live")
        assert ok and "is skipped" in said
    await clock.advance(2 * HOUR + 10 * MINUTE)
    async with engines.open(admins=ADMINS) as engine:
        assert await engine.schedules.fire_due() == 0
        assert await user_messages(engine, "cli-k") == []
        [made] = await engine.schedules.of_session("cli-k")
        assert made.next_due_at == START_MS + 3 * 3_600_000 and made.last_fired_at == 0
        # A due time met while running is no missed one.
        await clock.advance(50 * MINUTE + 30)
        assert await engine.schedules.fire_due() == 1
        assert await settle(engine, "cli-k") == ["echo: only live"]


# -- once per due time ----------------------------------------------------------------------------


class Crashed(Exception):
    pass


class CrashAt(CrashPoints):
    """Raises where the real crash point would SIGKILL: what was committed stays."""

    def __init__(self, step: str) -> None:
        super().__init__()
        self.wanted = step

    def reach(self, step: str) -> None:
        if step == self.wanted:
            raise Crashed(step)


async def test_a_crash_between_storing_the_task_and_moving_on_fires_once(
    engines: EngineRig, clock: FakeClock
) -> None:
    async with engines.open(admins=ADMINS) as engine:
        await command(engine, ANN, "cli-x", "/schedule every 1h exactly once")
        await clock.advance(HOUR)
        engine.schedules.crash = CrashAt("scheduled")
        with pytest.raises(Crashed):
            await engine.schedules._fire(
                (await engine.store.schedules.due(clock.now_ms()))[0], clock.now_ms()
            )
        [made] = await engine.schedules.of_session("cli-x")
        assert made.next_due_at == START_MS + 3_600_000  # not moved on
    async with engines.open(admins=ADMINS) as engine:
        await engine.router.recover(at_start=True)  # the stored task is taken up
        assert await engine.schedules.fire_due() == 0  # the same due time: stored already
        assert await settle(engine, "cli-x") == ["echo: exactly once"]
        assert await user_messages(engine, "cli-x") == [("schedule #1", "exactly once")]
        [made] = await engine.schedules.of_session("cli-x")
        assert made.next_due_at == START_MS + 2 * 3_600_000  # moved on now


async def test_a_second_firing_of_one_due_time_stores_nothing(
    engine: Engine, clock: FakeClock
) -> None:
    """Two instances that both saw the schedule due (a lease moving between them)."""
    await command(engine, ANN, "cli-twice", "/schedule every 1h once")
    await clock.advance(HOUR)
    [due] = await engine.store.schedules.due(clock.now_ms())
    assert await engine.schedules._fire(due, clock.now_ms())
    assert not await engine.schedules._fire(due, clock.now_ms())
    assert await settle(engine, "cli-twice") == ["echo: once"]


async def test_a_session_deleted_takes_its_schedules_with_it(engine: Engine) -> None:
    await command(engine, ANN, "cli-gone", "/schedule every 1h x")
    await command(engine, ANN, "cli-stays", "/schedule every 1h y")
    assert await engine.store.delete("cli-gone")
    assert await engine.schedules.of_session("cli-gone") == []
    assert len(await engine.schedules.of_session("cli-stays")) == 1
    assert await engine.store.schedules.counts() == {"cli-stays": 1}


async def test_a_schedule_moves_on_only_from_the_due_time_it_had(
    engine: Engine, clock: FakeClock
) -> None:
    """An instance that read the schedule before another moved it on cannot move it back."""
    await command(engine, ANN, "cli-stale", "/schedule every 1h x")
    [made] = await engine.schedules.of_session("cli-stale")
    table, first = engine.store.schedules, made.next_due_at
    assert await table.advance(made.id, first, first + 3_600_000, fired_at=first)
    assert not await table.advance(made.id, first, first + 60_000, fired_at=None)
    [now] = await engine.schedules.of_session("cli-stale")
    assert (now.next_due_at, now.last_fired_at) == (first + 3_600_000, first)
