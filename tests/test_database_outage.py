"""PostgreSQL goes away (its connections end, new ones are refused) under a running gateway:
what cannot be asked again waits for it, in order, and nothing is lost or done twice. The
database sits behind a TCP relay the test cuts and restores (`tcp_relay`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import RelayedDatabase
from discord_rig import (
    ANN,
    GENERAL,
    INTERACTION_CALLBACK,
    contents,
    custom_ids,
    general_only,
    prompt_in,
    reply_in,
    running,
    start_rig,
)
from fakes.discord import FakeDiscord
from structlog.testing import capture_logs
from support import REDIS_URL, open_redis, wait_until
from tcp_relay import Relay

from adapters.discord.adapter import NOT_RECORDED
from adapters.discord.commands import UNAVAILABLE
from gateway.bus import LocalBus, RedisBus
from gateway.clock import SYSTEM_CLOCK
from gateway.cluster.ownership import JOURNAL, Ownership, lease_of
from gateway.engine.journal import JournalHead, Replay
from gateway.engine.tasks import TaskTable
from gateway.events import Inbound, Origin
from gateway.leases import open_leases
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.journals import JournalRecord
from gateway.store.message_reads import StoredMessage
from gateway.store.sessions import SessionStore

ANN_HTTP = Origin("http", sender_id="ann", sender_name="Ann", window_hash="w1")


@pytest.fixture
async def relayed_runtime(
    tmp_path: Path, relayed_database: RelayedDatabase
) -> AsyncIterator[Runtime]:
    """A gateway core on the relayed database. A long lease TTL: its tasks stay here through a
    short outage."""
    settings = Settings(
        home=tmp_path / "home",
        database_url=relayed_database.relayed,
        lease_ttl_seconds=60,
        _env_file=None,
    )
    runtime = await Runtime.start(settings)
    try:
        yield runtime
    finally:
        await runtime.close()


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with general_only() as server:
        yield server


async def cut_under_a_message(
    fake: FakeDiscord, relay: Relay, logs: Sequence[Mapping[str, Any]]
) -> None:
    """Cut the database, then send "while down" in #general; return once its intake waits."""
    await relay.cut()
    fake.inject_message(GENERAL, ANN, "while down", mentions_bot=True)

    async def waiting() -> bool:
        return waiting_logged(logs, "taking a message in")

    assert await wait_until(waiting, within=15)


def waiting_logged(logs: Sequence[Mapping[str, Any]], what: str) -> bool:
    return any(str(e["event"]) == f"{what}: database unavailable, waiting" for e in logs)


async def test_the_look_for_tasks_stored_elsewhere_waits_for_the_database(
    tmp_path: Path, relayed_database: RelayedDatabase
) -> None:
    """Before a shared session's next task its owner reads the journals other instances
    stored. That read meeting the outage is asked again once the database is back, and finds
    them, instead of failing the session's queue."""
    url, relay, relayed = relayed_database.url, relayed_database.relay, relayed_database.relayed
    settings = Settings(home=tmp_path / "home", database_url=relayed, _env_file=None)
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

        def journal(stored: StoredMessage) -> JournalRecord:  # as another instance stores it
            head = JournalHead("cli-o", "0123456789abcdef", ANN_HTTP, "hi", stored.id, 0, 0)
            return head.record()

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
    fake: FakeDiscord, tmp_path: Path, relayed_database: RelayedDatabase
) -> None:
    """The gateway stops while a Discord message waits for the database: the stop does not
    wait for it past the grace, the wait ends with it, and the loss is logged."""
    relay, relayed = relayed_database.relay, relayed_database.relayed
    rig = await start_rig(fake, tmp_path / "home", database_url=relayed)
    rig.adapter.arrival_grace = 0.5
    try:
        with capture_logs() as logs:
            await cut_under_a_message(fake, relay, logs)
            assert len(rig.adapter._arriving) == 1
            waits = list(rig.adapter._arriving)
            await asyncio.wait_for(rig.adapter.stop(), 10)
        assert all(task.done() for task in waits)
        lost = [e for e in logs if e["event"].startswith("stopped while messages")]
        assert [e["count"] for e in lost] == [1]
    finally:
        await rig.runtime.close()


async def test_a_task_canceled_during_the_outage_is_not_taken_up_again(
    relayed_runtime: Runtime, relayed_database: RelayedDatabase
) -> None:
    """A running task is canceled while the database is down: its journal is removed once the
    database is back, so no later start runs the canceled task again."""
    relay, runtime = relayed_database.relay, relayed_runtime
    sent = await runtime.router.submit(Inbound(ANN_HTTP, "cli-c", "!sleep 30"))
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


async def test_a_discord_press_that_meets_the_outage_is_told_to_press_again(
    fake: FakeDiscord, tmp_path: Path, relayed_database: RelayedDatabase
) -> None:
    """An Approve press cannot be recorded while the database is down: the presser alone is
    told to press again (not Discord's "interaction failed"), the prompt stays open, and a
    press once the database is back answers it."""
    relay, relayed = relayed_database.relay, relayed_database.relayed
    home = tmp_path / "home"
    # A long lease TTL: the parked task stays here through the short outage.
    async with running(fake, home, database_url=relayed, lease_ttl_seconds=60) as rig:
        fake.inject_message(GENERAL, ANN, "!confirm deploy", mentions_bot=True)
        prompt = await prompt_in(fake, GENERAL)
        approve = next(cid for cid in custom_ids(prompt) if cid.endswith(":y"))

        async def delivered() -> bool:  # so that the cut finds nothing on its way
            return await rig.runtime.store.outbox.undelivered() == []

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
    relayed_runtime: Runtime, relayed_database: RelayedDatabase
) -> None:
    """A task starts while the database is down: its context is read once it is back, and it
    runs to its reply instead of ending in an error."""
    relay, runtime = relayed_database.relay, relayed_runtime
    head: list[JournalHead] = []

    def journal(stored: StoredMessage) -> JournalRecord:  # stored, not yet run anywhere
        head.append(JournalHead("cli-r", "fedcba9876543210", ANN_HTTP, "hello", stored.id, 0, 0))
        return head[0].record()

    stored = await runtime.store.take_in(
        "cli-r", "hello", sender="Ann", task_hash="fedcba9876543210", journal=journal
    )
    assert stored is not None
    task = TaskTable(runtime.store).add(head[0], (), Replay())
    with capture_logs() as logs:
        await relay.cut()
        run = asyncio.create_task(runtime.engine.runner.run(task))

        async def met() -> bool:  # the run met the outage, and waits for the database
            return any(str(e["event"]).endswith("database unavailable, waiting") for e in logs)

        assert await wait_until(met, within=15)
        await relay.restore()
        await asyncio.wait_for(run, 30)
    assert (task.status, task.reply, task.error) == ("done", "echo: hello", "")


async def test_a_slash_command_that_meets_the_outage_says_so(
    fake: FakeDiscord, tmp_path: Path, relayed_database: RelayedDatabase
) -> None:
    """`/status` while the database is down: the one who asked is told to try again (not
    Discord's "the application did not respond"); once it is back the command answers."""
    relay, relayed = relayed_database.relay, relayed_database.relayed
    async with running(fake, tmp_path / "home", database_url=relayed, lease_ttl_seconds=60):
        await relay.cut()
        fake.inject_command(ANN, GENERAL, "status")
        told = await fake.wait_for_call(
            INTERACTION_CALLBACK, lambda b: b.get("type") == 4, timeout=15
        )
        assert (told["data"]["content"], told["data"]["flags"] & 64) == (UNAVAILABLE, 64)
        await relay.restore()
        fake.inject_command(ANN, GENERAL, "status")
        answered = await fake.wait_for_call(
            INTERACTION_CALLBACK, lambda b: b.get("type") == 4, timeout=15
        )
        assert f"session: dc-{GENERAL}" in answered["data"]["content"]


async def test_a_signal_that_meets_the_outage_does_not_hold_up_the_bus(
    tmp_path: Path, relayed_database: RelayedDatabase
) -> None:
    """A "journal" signal asks the owner to look for tasks stored elsewhere. Its look meeting
    the outage fails at once (the next recovery tick looks again) rather than wait: the bus
    reader runs handlers one after another, and every later signal would wait behind it."""
    await (await open_redis()).close()  # skips without Redis (fails in CI)
    url, relay = relayed_database.url, relayed_database.relay
    settings = Settings(
        home=tmp_path / "home", database_url=relayed_database.relayed, _env_file=None
    )
    store = await SessionStore.open(settings)
    leases = await open_leases(url, "one", 60.0, SYSTEM_CLOCK)
    bus = RedisBus(REDIS_URL, namespace=tmp_path.name)

    async def take_up(records: list[JournalRecord]) -> int:
        return len(records)

    async def interrupt(_session_id: str) -> None:
        return None

    Ownership(
        leases,
        bus,
        store,
        take_up=take_up,
        interrupt=interrupt,
        is_busy=lambda _session: False,
        is_live=lambda _task: False,
    )
    heard = asyncio.Event()

    async def on_ping(_message: dict[str, Any]) -> None:
        heard.set()

    bus.on("ping", on_ping)
    await bus.start()
    try:
        await relay.cut()
        await bus.publish(JOURNAL, {"session_id": "cli-b"})
        await bus.publish("ping", {})
        await asyncio.wait_for(heard.wait(), 10)
    finally:
        await bus.close()
        await leases.close()
        await store.close()
