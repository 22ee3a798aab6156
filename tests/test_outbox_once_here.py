"""A pass over the pending outbox entries (at start-up, while the platform adapters already
take messages) lists an entry its own task is sending, or has sent since the list was read:
it is sent once all the same."""

from __future__ import annotations

import asyncio

import pytest
from engine_rig import Engine
from store_rows import outbox_of_task

from gateway.adapter import Progress
from gateway.events import Event, Inbound, Origin

pytestmark = pytest.mark.fast

CHAT = Origin("chat", channel_id="c1", sender_id="ann", sender_name="Ann")


class SlowSink:
    """Holds each reply until released, counting what reaches the platform."""

    def __init__(self) -> None:
        self.delivered: list[str] = []
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def deliver(self, origin: Origin, event: Event, progress: Progress) -> str | None:
        if event.kind != "text":
            return None
        self.holding.set()
        await self.release.wait()
        self.delivered.append(event.kind)
        return f"message-{len(self.delivered)}"

    async def notice(self, origin: Origin, text: str) -> None:
        return None


async def test_a_pass_over_pending_entries_skips_one_on_its_way(engine: Engine) -> None:
    sink = SlowSink()
    engine.router.register_sink("chat", sink)
    sub = await engine.router.submit(Inbound(CHAT, "dc-1", "hello"))
    await asyncio.wait_for(sink.holding.wait(), 10)  # the task's own delivery is under way
    listed = await engine.store.outbox.undelivered()
    assert [item.task_hash for item in listed] == [sub.task_hash]
    # Sent again, it would wait for the release like the first: the pass must not wait.
    assert await asyncio.wait_for(engine.assembled.courier.redeliver(), 5) == 0
    sink.release.set()
    assert (await engine.router.wait(sub.task_hash, 10)).status == "done"
    # The list read before the delivery ended is stale now: its entry is not sent again.
    assert await engine.assembled.courier.send(listed[0]) is True
    assert sink.delivered == ["text"]
    [item] = await outbox_of_task(engine.store.db, sub.task_hash)
    assert (item.status, item.platform_message_id) == ("delivered", "message-1")
