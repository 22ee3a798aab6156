"""PostgreSQL goes away (its connections end, new ones are refused) under a running gateway:
what cannot be asked again waits for it, in order, and nothing is lost or done twice. The
database sits behind a TCP relay the test cuts and restores (`tcp_relay`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import _pg_database, _pg_drop
from discord_rig import (
    ANN,
    GENERAL,
    GUILD,
    INTERACTION_CALLBACK,
    contents,
    custom_ids,
    prompt_in,
    reply_in,
    running,
    start_rig,
)
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel
from sqlalchemy.engine import make_url
from structlog.testing import capture_logs
from support import wait_until
from tcp_relay import Relay

from adapters.discord.adapter import NOT_RECORDED
from gateway.bus import LocalBus
from gateway.clock import SYSTEM_CLOCK
from gateway.engine.journal import JournalHead, Replay
from gateway.engine.ownership import Ownership, lease_of
from gateway.engine.tasks import TaskTable
from gateway.events import Inbound, Origin
from gateway.leases import open_leases
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store import outbox as outbox_table
from gateway.store.journals import JournalRecord
from gateway.store.messages import StoredMessage
from gateway.store.sessions import SessionStore


@pytest.fixture
async def database() -> AsyncIterator[tuple[str, Relay, str]]:
    """A PostgreSQL database of the test's own: its url, a relay in front of it, and the url
    through the relay."""
    url, name = await _pg_database()
    target = make_url(url)
    relay = await Relay(target.host or "127.0.0.1", target.port or 5432).start()
    try:
        yield url, relay, target.set(host="127.0.0.1", port=relay.port).render_as_string(False)
    finally:
        await relay.close()
        await _pg_drop(name)


def waiting_logged(logs: list[dict[str, object]], what: str) -> bool:
    return any(str(e["event"]) == f"{what}: database unavailable, waiting" for e in logs)


async def test_a_discord_message_that_meets_the_outage_waits_for_the_database(
    tmp_path: Path, database: tuple[str, Relay, str]
) -> None:
    """Discord does not deliver a message again: one that arrives while the database is down
    is stored once it is back, answered once, and the message after it stays after it."""
    _, relay, relayed = database
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[ANN])
        with point_discord_py_at(fake):
            home = tmp_path / "home"
            async with running(fake, home, database_url=relayed, lease_ttl_seconds=3) as rig:
                fake.inject_message(GENERAL, ANN, "before", mentions_bot=True)
                await reply_in(fake, GENERAL, "echo: before")
                with capture_logs() as logs:
                    await relay.cut()
                    fake.inject_message(GENERAL, ANN, "while down", mentions_bot=True)

                    async def waiting() -> bool:
                        return waiting_logged(logs, "taking a message in")

                    assert await wait_until(waiting, within=15)
                    fake.inject_message(GENERAL, ANN, "after it", mentions_bot=True)
                    await relay.restore()
                    await reply_in(fake, GENERAL, "echo: after it", within=30)
                messages = await rig.runtime.store.recent_messages(f"dc-{GENERAL}", 20)
                asked = [m.content for m in messages if m.role == "user"]
                assert asked == ["before", "while down", "after it"]
                echoes = [c for c in contents(fake, GENERAL) if c.startswith("echo:")]
                assert echoes == ["echo: before", "echo: while down", "echo: after it"]


async def test_the_look_for_tasks_stored_elsewhere_waits_for_the_database(
    tmp_path: Path, database: tuple[str, Relay, str]
) -> None:
    """Before a shared session's next task its owner reads the journals other instances
    stored. That read meeting the outage is asked again once the database is back, and finds
    them, instead of failing the session's queue."""
    url, relay, relayed = database
    settings = Settings(home=tmp_path / "home", database_url=relayed, _env_file=None)  # type: ignore[call-arg]
    store = await SessionStore.open(settings)
    # The lease goes straight to the database: only the archive's connections are cut.
    leases = await open_leases(url, "one", 60.0, SYSTEM_CLOCK)
    taken: list[JournalRecord] = []

    async def take_up(records: list[JournalRecord]) -> int:
        taken.extend(records)
        return len(records)

    async def interrupt(_session_id: str) -> None:
        raise AssertionError("the lease was never lost")

    ownership = Ownership(
        leases,
        LocalBus(),
        store,
        take_up=take_up,
        interrupt=interrupt,
        is_busy=lambda _session: True,
        is_live=lambda _task: False,
    )
    try:
        ann = Origin("http", sender_id="ann", sender_name="Ann", window_hash="w1")

        def journal(stored: StoredMessage) -> JournalRecord:  # as another instance stores it
            return JournalHead("cli-o", "0123456789abcdef", ann, "hi", stored.id, 0, 0).record()

        stored = await store.take_in(
            "cli-o", "hi", sender="Ann", task_hash="0123456789abcdef", journal=journal
        )
        assert stored is not None
        assert await leases.acquire(lease_of("cli-o"))
        with capture_logs() as logs:
            await relay.cut()
            refresh = asyncio.create_task(ownership.refresh("cli-o"))

            async def waiting() -> bool:
                return waiting_logged(logs, "looking for a session's tasks stored elsewhere")

            assert await wait_until(waiting, within=15)
            assert not refresh.done()
            await relay.restore()
            await asyncio.wait_for(refresh, 30)
        assert [r.task_hash for r in taken] == ["0123456789abcdef"]
    finally:
        await leases.close()
        await store.close()


async def test_a_stop_gives_up_a_message_still_waiting_for_the_database(
    tmp_path: Path, database: tuple[str, Relay, str]
) -> None:
    """The gateway stops while a Discord message waits for the database: the stop does not
    wait for it past the grace, the wait ends with it, and the loss is logged."""
    _, relay, relayed = database
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[ANN])
        with point_discord_py_at(fake):
            rig = await start_rig(fake, tmp_path / "home", database_url=relayed)
            rig.adapter.arrival_grace = 0.5
            try:
                with capture_logs() as logs:
                    await relay.cut()
                    fake.inject_message(GENERAL, ANN, "while down", mentions_bot=True)

                    async def waiting() -> bool:
                        return waiting_logged(logs, "taking a message in")

                    assert await wait_until(waiting, within=15)
                    assert len(rig.adapter._arriving) == 1
                    waits = list(rig.adapter._arriving)
                    await asyncio.wait_for(rig.adapter.stop(), 10)
                assert all(task.done() for task in waits)
                lost = [e for e in logs if e["event"].startswith("stopped while messages")]
                assert [e["count"] for e in lost] == [1]
            finally:
                await rig.runtime.close()


async def test_a_task_canceled_during_the_outage_is_not_taken_up_again(
    tmp_path: Path, database: tuple[str, Relay, str]
) -> None:
    """A running task is canceled while the database is down: its journal is removed once the
    database is back, so no later start runs the canceled task again."""
    _, relay, relayed = database
    settings = Settings(  # type: ignore[call-arg]
        home=tmp_path / "home", database_url=relayed, lease_ttl_seconds=60, _env_file=None
    )
    runtime = await Runtime.start(settings)
    try:
        ann = Origin("http", sender_id="ann", sender_name="Ann", window_hash="w1")
        sent = await runtime.router.submit(Inbound(ann, "cli-c", "!sleep 30"))
        task = sent.task_hash

        async def sleeping() -> bool:  # its context is read: the agent sleeps
            view = runtime.router.task(task)
            return any(e.kind == "text_delta" for e in view.events)

        assert await wait_until(sleeping, within=10)
        with capture_logs() as logs:
            await relay.cut()
            assert await runtime.router.cancel("cli-c", task, by="ann")

            async def waiting() -> bool:
                return waiting_logged(logs, "task canceled, its journal not yet removed")

            assert await wait_until(waiting, within=15)
            await relay.restore()
            view = await runtime.router.wait(task, 15)
        assert view.status == "canceled"
        assert [r.task_hash for r in await runtime.store.unfinished()] == []
    finally:
        await runtime.close()


async def test_a_discord_press_that_meets_the_outage_is_told_to_press_again(
    tmp_path: Path, database: tuple[str, Relay, str]
) -> None:
    """An Approve press cannot be recorded while the database is down: the presser alone is
    told to press again (not Discord's "interaction failed"), the prompt stays open, and a
    press once the database is back answers it."""
    _, relay, relayed = database
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[ANN])
        with point_discord_py_at(fake):
            home = tmp_path / "home"
            # A long lease TTL: the parked task stays here through the short outage.
            async with running(fake, home, database_url=relayed, lease_ttl_seconds=60) as rig:
                fake.inject_message(GENERAL, ANN, "!confirm deploy", mentions_bot=True)
                prompt = await prompt_in(fake, GENERAL)
                approve = next(cid for cid in custom_ids(prompt) if cid.endswith(":y"))

                async def delivered() -> bool:  # so that the cut finds nothing on its way
                    return await outbox_table.undelivered(rig.runtime.store.db) == []

                assert await wait_until(delivered, within=10)
                await relay.cut()
                fake.inject_component(ANN, prompt, approve)
                told = await fake.wait_for_call(
                    INTERACTION_CALLBACK, lambda b: b.get("type") == 4, timeout=10
                )
                assert told["data"]["content"] == NOT_RECORDED
                assert told["data"]["flags"] & 64  # only the presser sees it
                await relay.restore()
                fake.inject_component(ANN, prompt, approve)
                await reply_in(fake, GENERAL, "approved: deploy", within=15)
                echoes = [c for c in contents(fake, GENERAL) if c.startswith("approved:")]
                assert echoes == ["approved: deploy"]


async def test_a_task_whose_context_read_meets_the_outage_waits_for_it(
    tmp_path: Path, database: tuple[str, Relay, str]
) -> None:
    """A task starts while the database is down: its context is read once it is back, and it
    runs to its reply instead of ending in an error."""
    _, relay, relayed = database
    settings = Settings(  # type: ignore[call-arg]
        home=tmp_path / "home", database_url=relayed, lease_ttl_seconds=60, _env_file=None
    )
    runtime = await Runtime.start(settings)
    try:
        ann = Origin("http", sender_id="ann", sender_name="Ann", window_hash="w1")
        head: list[JournalHead] = []

        def journal(stored: StoredMessage) -> JournalRecord:  # stored, not yet run anywhere
            head.append(JournalHead("cli-r", "fedcba9876543210", ann, "hello", stored.id, 0, 0))
            return head[0].record()

        stored = await runtime.store.take_in(
            "cli-r", "hello", sender="Ann", task_hash="fedcba9876543210", journal=journal
        )
        assert stored is not None
        task = TaskTable(runtime.store).add(head[0], (), Replay())
        with capture_logs() as logs:
            await relay.cut()
            run = asyncio.create_task(runtime.router.runner.run(task))

            async def met() -> bool:  # the run met the outage, and waits for the database
                return any(str(e["event"]).endswith("database unavailable, waiting") for e in logs)

            assert await wait_until(met, within=15)
            await relay.restore()
            await asyncio.wait_for(run, 30)
        assert (task.status, task.reply, task.error) == ("done", "echo: hello", "")
    finally:
        await runtime.close()
