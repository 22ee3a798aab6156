"""Schedules act for their creator: one identity's schedules stay within its task limits, its
schedule quotas refuse what is past them, and its schedules are suspended (kept, not fired)
when its credential goes, until a gateway admin resumes them — on a clock the test moves."""

from __future__ import annotations

import pytest
from clock import START_MS, FakeClock
from engine_rig import EngineRig

from gateway.auth import NotAllowed
from gateway.events import Origin
from gateway.schedule_spec import BadSchedule
from gateway.schedules import NewSchedule, ScheduleQuota
from gateway.store.bans import BanList

HOUR = 3600.0
MINUTE = 60.0
BOB = Origin("http", sender_id="bob", sender_name="Bob")
CAROL = Origin("http", sender_id="carol", sender_name="Carol")
ROOT = Origin("http", sender_id="root", sender_name="Root")
ADMINS = "http:root"

pytestmark = pytest.mark.fast


async def test_a_hundred_schedules_of_one_token_stay_within_its_limits(
    engines: EngineRig, clock: FakeClock
) -> None:
    async with engines.open(
        admins=ADMINS,
        max_running_per_sender=1,
        max_pending_per_sender=2,
        max_schedules_per_identity=0,
        min_schedule_interval_seconds=0,
    ) as engine:
        for n in range(100):
            # A session holds 50 schedules at most: the token spreads them over four.
            sid = f"cli-bob{n % 4}"
            await engine.schedules.create(sid, BOB, NewSchedule("every 1m", "!sleep 3600"))
        for minute, takes in ((1, 2), (2, 0), (3, 0)):
            await clock.advance(MINUTE)
            # One running, one waiting its turn; the others are dropped at this due time,
            # and while those two go on, every one is.
            assert await engine.schedules.fire_due() == takes, minute
            assert engine.router.load() == (1, 1)  # only bob has tasks: (running, queued)
            for i in range(4):
                task = engine.router.running_task(f"cli-bob{i}")
                assert task is None or task.origin.sender_key == "http:bob"
            # None was lost: each moved on to its next due time.
            mine = [s for i in range(4) for s in await engine.schedules.of_session(f"cli-bob{i}")]
            assert len(mine) == 100
            assert {s.next_due_at for s in mine} == {START_MS + (minute + 1) * 60_000}


async def test_schedule_quotas_refuse_past_the_limit_and_name_it(
    engines: EngineRig,
) -> None:
    async with engines.open(
        admins=ADMINS, max_schedules_per_identity=2, min_schedule_interval_seconds=600
    ) as engine:
        schedules = engine.schedules
        with pytest.raises(ScheduleQuota, match="AGENVOY_MIN_SCHEDULE_INTERVAL_SECONDS"):
            await schedules.create("cli-b", BOB, NewSchedule("every 5m", "too often"))
        with pytest.raises(ScheduleQuota, match="every 120 s"):
            await schedules.create("cli-b", BOB, NewSchedule("*/2 * * * *", "cron too often"))
        # Twice a day but a minute apart is too often too.
        with pytest.raises(ScheduleQuota, match="every 60 s"):
            await schedules.create("cli-b", BOB, NewSchedule("0,1 9 * * *", "close pair"))
        await schedules.create("cli-b", BOB, NewSchedule("every 10m", "one"))
        await schedules.create("cli-b2", BOB, NewSchedule("@daily", "two"))
        with pytest.raises(ScheduleQuota, match=r"at most 2 \(AGENVOY_MAX_SCHEDULES_PER_IDENTITY"):
            await schedules.create("cli-b3", BOB, NewSchedule("@daily", "three"))
        # Linked identities are one person: carol, linked to bob, has none left either.
        await engine.store.ownership.link("http:carol", "http:bob")
        with pytest.raises(ScheduleQuota, match="AGENVOY_MAX_SCHEDULES_PER_IDENTITY"):
            await schedules.create("cli-c", CAROL, NewSchedule("@daily", "via a link"))
        # Gateway admins are held to neither limit.
        for n in range(3):
            await schedules.create("cli-r", ROOT, NewSchedule("every 1m", f"admin {n}"))
        assert len(await schedules.of_session("cli-r")) == 3


async def test_a_revoked_creators_schedules_are_suspended_until_an_admin_resumes_them(
    engines: EngineRig, clock: FakeClock
) -> None:
    async with engines.open(admins=ADMINS) as engine:
        schedules = engine.schedules
        made = await schedules.create("cli-b", BOB, NewSchedule("every 1h", "bob was here"))
        other = await schedules.create("cli-c", CAROL, NewSchedule("every 1h", "carol's"))
        assert await schedules.suspend_creators({"http:bob"}) == 1
        assert await schedules.suspend_creators({"http:bob"}) == 0  # once is enough
        [held] = await schedules.of_session("cli-b")
        assert held.suspended and held.suspended_at == START_MS
        assert "revoked" in held.suspended_reason
        await clock.advance(3 * HOUR)
        assert await schedules.fire_due() == 1  # carol's only
        assert [s.id for s in await engine.store.schedules.due(clock.now_ms())] == []
        # Nobody but a gateway admin resumes it; bob holds no token, so only by taking over.
        with pytest.raises(NotAllowed):
            await schedules.resume(made.id, CAROL, {"http:carol"})
        with pytest.raises(BadSchedule, match="holds no credential"):
            await schedules.resume(made.id, ROOT, {"http:carol", "http:root"})
        with pytest.raises(BadSchedule, match="not suspended"):
            await schedules.resume(other.id, ROOT, {"http:carol", "http:root"})
        resumed = await schedules.resume(made.id, ROOT, {"http:root"}, take_over=True)
        assert not resumed.suspended and resumed.created_by_id == "http:root"
        assert clock.now_ms() < resumed.next_due_at <= clock.now_ms() + 3_600_000
        # Tokens removed while no gateway ran: found at start.
        again = await schedules.create("cli-c2", CAROL, NewSchedule("@daily", "more"))
        assert await schedules.suspend_orphans({"http:root", "http:api"}) == 2
        suspended = {s.id for s in await engine.store.schedules.suspended()}
        assert suspended == {other.id, again.id}
        # A creator holding a token again gets it back as theirs.
        back = await schedules.resume(other.id, ROOT, {"http:carol"})
        assert not back.suspended and back.created_by_id == "http:carol"


async def test_a_banned_creators_schedule_is_refused_and_moves_on(
    engines: EngineRig, clock: FakeClock
) -> None:
    async with engines.open(admins=ADMINS, min_schedule_interval_seconds=0) as engine:
        await engine.schedules.create("cli-b", BOB, NewSchedule("every 1m", "hello"))
        await BanList(engine.store.db).add("*", "http:bob", by="terminal:op", reason="", at=0)
        await clock.advance(MINUTE)  # past the bans' one-second copy, and due
        assert await engine.schedules.fire_due() == 0
        # Refused at this due time and moved on, not tried again at every look.
        (schedule,) = await engine.schedules.of_session("cli-b")
        assert schedule.next_due_at == START_MS + 2 * 60_000
        assert engine.router.running_task("cli-b") is None
