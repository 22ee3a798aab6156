"""Schedules in real gateway processes: one killed (SIGKILL) between storing a scheduled task
and moving the schedule on still runs that due time exactly once; two instances on one
PostgreSQL database fire a due schedule once.

A due time is brought about by moving the schedule's `next_due_at` into the past in the
archive — a time missed while no gateway ran, or one that has just come — rather than by
waiting for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import aiohttp
import pytest
from cluster_rig import Cluster, answered, cluster, until
from conftest import Backends
from fakes.telegram import FakeTelegram
from gateway_proc import Gateway, free_port
from sqlalchemy import update
from sqlmodel import col
from support import wait_until
from telegram_rig import reply_in, sent_to

from gateway.clock import now_ms
from gateway.settings import Settings
from gateway.store.models import ScheduleRow
from gateway.store.sessions import SessionStore

pytestmark = pytest.mark.slow

__all__ = ["cluster"]  # the fixture

GROUP = -500
ROOT = 51
PROMPT = "post the daily summary"


@contextlib.asynccontextmanager
async def archive(home: Path, env: dict[str, str]) -> AsyncIterator[SessionStore]:
    url = env.get("AGENVOY_DATABASE_URL", "")
    settings = Settings(home=home, database_url=url, _env_file=None)
    store = await SessionStore.open(settings)
    try:
        yield store
    finally:
        await store.close()


async def make_due(store: SessionStore, at: int) -> None:
    """Every schedule is due at `at`."""
    stmt = update(ScheduleRow).where(col(ScheduleRow.id) > 0).values(next_due_at=at)
    await store.db.write(lambda session: session.connection().execute(stmt))


async def moved_on(gateway: Gateway, missed: int) -> bool:
    """Whether the running gateway has moved the group's schedule past `missed`."""
    url = f"{gateway.url}/v1/session/tg-{GROUP}/schedules"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        body = await resp.json()
        assert "schedules" in body, body
        [schedule] = body["schedules"]
        return bool(schedule["next_due_at"] > missed)


@pytest.mark.parametrize("step", ["stored", "scheduled"])
async def test_killed_between_storing_a_scheduled_task_and_moving_on_it_runs_once(
    tmp_path: Path, backends: Backends, step: str
) -> None:
    home, env = tmp_path / "home", await backends.new()
    async with FakeTelegram() as fake:
        gateway = Gateway(
            home,
            free_port(),
            **env,
            AGENVOY_TELEGRAM_TOKEN=fake.token,
            AGENVOY_TELEGRAM_API_URL=fake.url,
            AGENVOY_ADMINS=f"telegram:{ROOT}",
            NO_PROXY="127.0.0.1,localhost",
        )
        try:
            await gateway.start()
            group = fake.group(GROUP, "team")
            fake.inject_message(group, fake.user(ROOT, "Root"), f"/schedule every 1d {PROMPT}")
            await reply_in(fake, GROUP, "schedule #1: every 1d")
            await gateway.stop()
            # Yesterday's due time passed while the gateway was down: it runs once on start.
            missed = now_ms() - 86_400_000
            async with archive(home, env) as store:
                await make_due(store, missed)
            await gateway.start(AGENVOY_CRASH_AT=step)
            assert await gateway.died() == -9
            async with archive(home, env) as store:
                [schedule] = await store.schedules.of_session(f"tg-{GROUP}")
                assert schedule.next_due_at == missed  # stored, not moved on
            await gateway.start()
            await reply_in(fake, GROUP, f"echo: {PROMPT}")
            # The taken-up task may answer before the schedule job has seen the due time
            # stored already and moved on: wait for that before stopping.
            assert await wait_until(partial(moved_on, gateway, missed), 10)
            await gateway.stop()
        finally:
            await gateway.close()
        assert [t for t in sent_to(fake, GROUP) if t.endswith(PROMPT)] == [f"echo: {PROMPT}"]
    async with archive(home, env) as store:
        messages = await store.recent_messages(f"tg-{GROUP}", 100)
        assert [(m.role, m.sender) for m in messages if m.content.endswith(PROMPT)] == [
            ("user", "schedule #1"),
            ("assistant", "offline"),
        ]
        assert await store.unfinished() == []
        [schedule] = await store.schedules.of_session(f"tg-{GROUP}")
        assert schedule.next_due_at > now_ms() and schedule.last_fired_at > missed


async def test_two_instances_fire_a_due_schedule_once(cluster: Cluster) -> None:
    fast = {"AGENVOY_SCHEDULE_CHECK_SECONDS": "0.2"}
    first = await cluster.add(**fast)
    second = await cluster.add(**fast)
    async with cluster.http.post(first.url + "/v1/session", json={"prefix": "chat"}) as resp:
        sid = (await resp.json())["session_id"]
    body = {"spec": "every 1d", "prompt": "once for everyone"}
    async with cluster.http.post(f"{second.url}/v1/session/{sid}/schedules", json=body) as resp:
        assert resp.status == 201, await resp.text()
    store = await cluster.archive()
    try:
        due = now_ms()
        await make_due(store, due)

        async def moved_on() -> bool:
            [schedule] = await store.schedules.of_session(sid)
            return schedule.next_due_at > due

        await until(moved_on, "the schedule moved on")
        await until(lambda: answered(store, sid, 1), "the scheduled task answered")
        messages = await store.recent_messages(sid, 100)
        assert [(m.role, m.content) for m in messages] == [
            ("user", "once for everyone"),
            ("assistant", "echo: once for everyone"),
        ]
    finally:
        await store.close()
    fired = [
        (gateway.env["AGENVOY_INSTANCE_ID"], entry.get("again"))
        for gateway in (first, second)
        for entry in gateway.log
        if entry.get("event") == "schedule fired"
    ]
    assert len(fired) == 1 and fired[0][1] is False, fired
