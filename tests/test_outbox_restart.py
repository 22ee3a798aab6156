from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from store_rows import outbox_of_task
from support import wait_until

from gateway.adapter import Progress, Undeliverable
from gateway.events import Event, Inbound, Origin
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.action_record import ActionRecord

CHAT = Origin("chat", channel_id="c1", sender_id="ann", sender_name="Ann")


class Sink:
    """A platform that records deliveries; it can fail or hang on demand."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.delivered: list[Event] = []
        self.hang_on_text = False
        self.refuse = False
        self.tries = 0
        self.arrived = asyncio.Event()
        self.stuck = asyncio.Event()

    async def deliver(self, origin: Origin, event: Event, progress: Progress) -> str | None:
        if event.kind == "text":
            self.tries += 1
        if event.kind == "text" and self.refuse:
            raise Undeliverable("chat not found") from LookupError("chat not found")
        if event.kind == "text" and self.hang_on_text:
            self.stuck.set()
            await asyncio.Event().wait()  # a platform that never answers
        if event.kind in ("text", "confirm", "ask_user") and self.failures:
            self.failures -= 1
            raise ConnectionError("platform unavailable")
        self.delivered.append(event)
        self.arrived.set()
        return f"{event.kind}-{sum(e.kind == event.kind for e in self.delivered)}"

    async def notice(self, origin: Origin, text: str) -> None:
        return None

    async def until(self, kind: str) -> None:
        async def poll() -> None:
            while True:
                self.arrived.clear()
                if kind in self.kinds():
                    return
                await self.arrived.wait()

        await asyncio.wait_for(poll(), 10)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.delivered if e.kind in ("text", "confirm", "ask_user")]


def settings_for(home: Path) -> Settings:
    return Settings(home=home, confirm_timeout_seconds=30, _env_file=None)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


async def start(home: Path, sink: Sink) -> Runtime:
    rt = await Runtime.start(settings_for(home))
    rt.router.register_sink("chat", sink)
    rt.engine.courier.initial_wait = 0.01
    return rt


@pytest.fixture
async def runtime(home: Path) -> AsyncIterator[tuple[Runtime, Sink]]:
    sink = Sink()
    rt = await start(home, sink)
    try:
        yield rt, sink
    finally:
        await rt.close()


async def test_delivery_failing_twice_is_delivered_once(runtime: tuple[Runtime, Sink]) -> None:
    rt, sink = runtime
    sink.failures = 2
    sub = await rt.router.submit(Inbound(CHAT, "dc-1", "hello"))
    state = await rt.router.wait(sub.task_hash, 10)
    assert state.status == "done"
    assert sink.kinds() == ["text"]
    (item,) = await outbox_of_task(rt.store.db, sub.task_hash)
    assert (item.status, item.attempts, item.platform_message_id) == ("delivered", 3, "text-1")


async def test_delivery_failing_until_its_expiry_is_recorded(
    runtime: tuple[Runtime, Sink],
) -> None:
    rt, sink = runtime
    rt.engine.courier.expiry_seconds = 0.5  # past the burst, a few tries in the background
    sink.failures = 10_000
    sub = await rt.router.submit(Inbound(CHAT, "dc-2", "hello"))
    await rt.router.wait(sub.task_hash, 30)

    def errors() -> list[ActionRecord]:
        return [r for r in rt.store.files("dc-2").action_log.read() if r.kind == "error"]

    async def failed_and_said() -> bool:
        # The entry is marked failed first, then its error line is written.
        (item,) = await outbox_of_task(rt.store.db, sub.task_hash)
        return item.status == "failed" and bool(errors())

    assert await wait_until(failed_and_said, 10)
    (item,) = await outbox_of_task(rt.store.db, sub.task_hash)
    assert item.attempts > rt.engine.courier.attempts  # tried on after the first burst
    assert [r.task_hash for r in errors()] == [sub.task_hash]
    assert f"failed after {item.attempts} attempts" in errors()[0].body
    assert rt.router.counters["deliveries_failed"] == 1
    assert rt.engine.courier.waiting() == 0


async def test_a_refusal_ends_the_entry_at_once(runtime: tuple[Runtime, Sink]) -> None:
    rt, sink = runtime
    sink.refuse = True
    sub = await rt.router.submit(Inbound(CHAT, "dc-4", "hello"))
    await rt.router.wait(sub.task_hash, 10)
    (item,) = await outbox_of_task(rt.store.db, sub.task_hash)
    assert (item.status, item.attempts) == ("failed", 1)
    assert sink.tries == 1
    errors = [r for r in rt.store.files("dc-4").action_log.read() if r.kind == "error"]
    assert [r.task_hash for r in errors] == [sub.task_hash]
    assert "refused by chat" in errors[0].body and "chat not found" in errors[0].body
    assert rt.router.counters["deliveries_failed"] == 1


async def test_reply_generated_but_not_delivered_is_sent_once_after_restart(home: Path) -> None:
    first_sink = Sink()
    first_sink.hang_on_text = True
    rt = await start(home, first_sink)
    await rt.router.submit(Inbound(CHAT, "dc-3", "ping"))
    await asyncio.wait_for(first_sink.stuck.wait(), 10)  # reply made, stuck in delivery
    await rt.close()  # the process goes away before the platform answered

    second_sink = Sink()
    rt2 = await start(home, second_sink)
    try:
        assert await rt2.router.recover() == 0  # the run is recorded: nothing to replay
        assert await rt2.engine.courier.redeliver() == 1
        assert second_sink.kinds() == ["text"]
        assert second_sink.delivered[0].text == "echo: ping"  # type: ignore[union-attr]
        assert await rt2.engine.courier.redeliver() == 0  # and never again
        messages = await rt2.store.recent_messages("dc-3")
        assert [(m.role, m.content) for m in messages] == [
            ("user", "ping"),
            ("assistant", "echo: ping"),
        ]
        assert list(rt2.store.files("dc-3").list_pending()) == []
    finally:
        await rt2.close()


async def test_prompt_parked_before_restart_is_asked_again_and_answered(home: Path) -> None:
    rt = await start(home, Sink())
    sub = await rt.router.submit(Inbound(CHAT, "tg--10", "!confirm deploy"))
    await rt.router.wait(sub.task_hash, 10, until_prompt=True)
    await rt.close()

    sink = Sink()
    rt2 = await start(home, sink)
    try:
        assert await rt2.router.recover() == 1
        state = await rt2.router.wait(sub.task_hash, 10, until_prompt=True)
        assert state.prompt is not None
        await sink.until("confirm")
        assert sink.kinds() == ["confirm"]  # re-delivered to the origin
        await rt2.router.answer("tg--10", sub.task_hash, CHAT, approve=True)
        state = await rt2.router.wait(sub.task_hash, 10)
        assert state.reply == "approved: deploy"
        messages = await rt2.store.recent_messages("tg--10")
        assert [(m.role, m.content) for m in messages] == [
            ("user", "!confirm deploy"),
            ("assistant", "approved: deploy"),
        ]
        history = rt2.store.files("tg--10").history.read()
        assert [m.content for m in history] == ["!confirm deploy", "approved: deploy"]
    finally:
        await rt2.close()


async def test_idempotent_tool_cut_off_by_a_crash_runs_again(home: Path) -> None:
    rt = await start(home, Sink())
    sub = await rt.router.submit(Inbound(CHAT, "cli-t", "!write notes.txt hello"))
    await rt.router.wait(sub.task_hash, 10, until_prompt=True)
    await rt.close()

    sink = Sink()
    rt2 = await start(home, sink)
    # As if the process died inside the tool: answered, started, never finished.
    await rt2.store.save_journal(
        sub.task_hash,
        status="running",
        steps=[
            {"type": "prompt", "kind": "confirm", "answer": {"approved": True, "by": "Ann"}},
            {
                "type": "tool",
                "call_id": f"{sub.task_hash}-1",
                "tool": "write_file",
                "state": "started",
            },
        ],
        prompt=None,
    )
    files = rt.store.files("cli-t")
    try:
        assert await rt2.router.recover() == 1
        state = await rt2.router.wait(sub.task_hash, 10)
        # Writing the same text again is the same effect: the write is finished, not failed.
        assert state.reply == "wrote notes.txt (5 bytes)"
        assert (files.dir / "workspace" / "notes.txt").read_text() == "hello"
        assert sink.kinds() == ["text"]  # no second confirmation was asked
    finally:
        await rt2.close()


async def test_finished_tool_is_not_run_again_on_replay(home: Path) -> None:
    rt = await start(home, Sink())
    sub = await rt.router.submit(Inbound(CHAT, "cli-u", "!write a.txt one"))
    await rt.router.wait(sub.task_hash, 10, until_prompt=True)
    await rt.close()
    files = rt.store.files("cli-u")
    rt2 = await start(home, Sink())
    await rt2.store.save_journal(
        sub.task_hash,
        status="running",
        steps=[
            {"type": "prompt", "kind": "confirm", "answer": {"approved": True, "by": "Ann"}},
            {
                "type": "tool",
                "call_id": f"{sub.task_hash}-1",
                "tool": "write_file",
                "state": "started",
            },
            {
                "type": "tool",
                "call_id": f"{sub.task_hash}-1",
                "state": "finished",
                "status": "ok",
                "result": "3 bytes",
            },
        ],
        prompt=None,
    )
    try:
        await rt2.router.recover()
        state = await rt2.router.wait(sub.task_hash, 10)
        assert state.reply == "wrote a.txt (3 bytes)"
        assert not (files.dir / "workspace" / "a.txt").exists()  # the recorded result stood
    finally:
        await rt2.close()
