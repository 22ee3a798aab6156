"""Queue modes: what messages that arrive while a session runs a `!sleep` task do — followed up,
collected into one task, handed to the running task, or interrupting it — through the router.
Real gateways killed at these moments: tests/test_queue_modes_crash.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from clock import FakeClock
from engine_rig import Engine, EngineRig
from support import wait_until
from test_router import ANN, BOB, RecordingSink, inbound

from gateway.engine.errors import QueueFull
from gateway.engine.router import Router
from gateway.engine.views import Submission
from gateway.events import Inbound, Origin
from gateway.store.sessions import SessionStore

pytestmark = pytest.mark.fast

ROOT = Origin("http", sender_id="root", sender_name="Root", window_hash="w0")


@pytest.fixture
async def engine(engines: EngineRig) -> AsyncIterator[Engine]:
    async with engines.open(admins="http:root", max_queued_per_session=3) as opened:
        yield opened


async def set_mode(router: Router, sid: str, mode: str) -> None:
    reply = await router.submit(Inbound(ROOT, sid, f"/queue {mode}"))
    assert reply.command is not None and reply.command.ok, reply.command


async def running(router: Router, sub: Submission) -> None:
    assert await wait_until(lambda: _status(router, sub, "running"), 5)


async def _status(router: Router, sub: Submission, status: str) -> bool:
    return router.task(sub.task_hash).status == status


async def tick(clock: FakeClock, seconds: int) -> None:
    """Let a `!sleep` run on for `seconds`: it sleeps one second at a time."""
    for _ in range(seconds):
        await clock.until_sleeping(1, seconds=1)
        await clock.advance(1)


async def ended(router: Router, sub: Submission) -> tuple[str, str]:
    view = await router.wait(sub.task_hash, 10)
    assert view.finished, view.status
    return view.status, view.reply


async def replies(store: SessionStore, sid: str) -> list[str]:
    return [m.content for m in await store.recent_messages(sid, 50) if m.role == "assistant"]


async def test_followup_is_the_default(engine: Engine, clock: FakeClock) -> None:
    router = engine.router
    sleeper = await router.submit(inbound("cli-f", "!sleep 2"))
    await running(router, sleeper)
    later = [await router.submit(inbound("cli-f", text)) for text in ("one", "two")]
    await tick(clock, 2)
    assert [await ended(router, s) for s in (sleeper, *later)] == [
        ("done", "slept 2s"),
        ("done", "echo: one"),
        ("done", "echo: two"),
    ]


async def test_collect_answers_what_waited_in_one_task(engine: Engine, clock: FakeClock) -> None:
    router, sink = engine.router, RecordingSink()
    router.register_sink("http", sink)
    await set_mode(router, "cli-c", "collect")
    assert "queue: collect" in (await router.submit(Inbound(ANN, "cli-c", "/queue"))).command.text  # type: ignore[union-attr]
    sleeper = await router.submit(inbound("cli-c", "!sleep 2"))
    await running(router, sleeper)
    first = await router.submit(inbound("cli-c", "first"))
    second = await router.submit(inbound("cli-c", "second", BOB))
    await tick(clock, 2)
    assert await ended(router, second) == ("done", "echo: second")
    collected = router.task(first.task_hash)
    assert (collected.status, collected.collected_into) == ("collected", second.task_hash)
    assert (BOB, "collected 2 messages") in sink.notices
    # Both messages stay in the archive in the order they came; one reply answers them.
    archived = [m.content for m in await engine.store.recent_messages("cli-c", 50)]
    assert archived[-4:] == ["first", "second", "slept 2s", "echo: second"]
    assert await replies(engine.store, "cli-c") == ["slept 2s", "echo: second"]
    assert await engine.store.unfinished() == []  # the collected task's journal went too


async def test_a_lone_waiting_message_is_not_collected(engine: Engine, clock: FakeClock) -> None:
    router = engine.router
    await set_mode(router, "cli-l", "collect")
    sleeper = await router.submit(inbound("cli-l", "!sleep 1"))
    await running(router, sleeper)
    only = await router.submit(inbound("cli-l", "alone"))
    await tick(clock, 1)
    assert await ended(router, only) == ("done", "echo: alone")


async def test_steer_hands_messages_to_the_running_task(engine: Engine, clock: FakeClock) -> None:
    router = engine.router
    await set_mode(router, "cli-s", "steer")
    sleeper = await router.submit(inbound("cli-s", "!sleep 3"))
    await running(router, sleeper)
    note = await router.submit(inbound("cli-s", "also this"))
    await tick(clock, 3)
    assert await ended(router, sleeper) == ("done", "slept 3s; took in: also this")
    view = router.task(note.task_hash)
    assert (view.status, view.collected_into) == ("collected", sleeper.task_hash)
    assert await replies(engine.store, "cli-s") == ["slept 3s; took in: also this"]


async def test_interrupt_cancels_what_runs_and_waits(engine: Engine, clock: FakeClock) -> None:
    router = engine.router
    await set_mode(router, "cli-i", "interrupt")
    sleeper = await router.submit(inbound("cli-i", "!sleep 30"))
    await running(router, sleeper)
    newest = await router.submit(inbound("cli-i", "never mind"))
    assert newest.position == 0  # not "queued": what was ahead is gone
    assert await ended(router, newest) == ("done", "echo: never mind")
    assert await ended(router, sleeper) == ("canceled", "")
    assert await replies(engine.store, "cli-i") == ["echo: never mind"]


async def test_a_full_queue_refuses_with_a_clear_message(engine: Engine, clock: FakeClock) -> None:
    router = engine.router
    sleeper = await router.submit(inbound("cli-cap", "!sleep 5"))
    await running(router, sleeper)
    for n in range(3):
        await router.submit(inbound("cli-cap", f"wait {n}", BOB))
    before = len(await engine.store.recent_messages("cli-cap", 50))
    with pytest.raises(QueueFull, match="3 messages waiting"):
        await router.submit(inbound("cli-cap", "one too many"))
    assert len(await engine.store.recent_messages("cli-cap", 50)) == before  # nothing stored
    await router.cancel_all("cli-cap", by="test")


async def test_only_admins_change_the_mode_of_a_shared_chat(engine: Engine) -> None:
    group = Origin("telegram", channel_id="-100", sender_id="5", sender_name="Eve")
    reply = await engine.router.submit(Inbound(group, "tg--100", "/queue interrupt"))
    assert reply.command is not None and not reply.command.ok
    row = await engine.store.get("tg--100")
    assert row is None or row.queue_mode == "followup"
    reply = await engine.router.submit(Inbound(ROOT, "cli-m", "/queue sideways"))
    assert reply.command is not None and "unknown queue mode" in reply.command.text
