"""A reply the platform takes in parts: what the outbox row says at each hand-over.

Before a part is handed to the platform, the row must say that every earlier part is out and
that this one may be (so a restart goes on from it, marked as a possible repeat). That a part
was accepted is written with the next write the delivery makes rather than alone.
"""

from __future__ import annotations

import pytest
from clock import FakeClock
from engine_rig import Engine
from store_rows import outbox_of_task

from gateway.adapter import Progress
from gateway.events import Event, Inbound, Origin
from gateway.store.db import Database

pytestmark = pytest.mark.fast

CHAT = Origin("chat", channel_id="c1", sender_id="ann", sender_name="Ann")
PARTS = 3


class PartedSink:
    """Sends a reply as PARTS parts; before each, notes what the outbox row says. It can
    fail once, on a given part, after the platform refused it."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.fail_on: int | None = None
        self.seen_before_part: list[tuple[int, int, int]] = []  # (part, sent, attempted)
        self.posted: list[str] = []

    async def deliver(self, origin: Origin, event: Event, progress: Progress) -> str | None:
        if event.kind != "text":
            return None
        for index in range(progress.sent, PARTS):
            await progress.part_started(index)
            [row] = await outbox_of_task(self.db, event.task_hash)
            self.seen_before_part.append((index, row.parts_sent, row.parts_attempted))
            if index == self.fail_on:
                self.fail_on = None
                await progress.part_refused(index)
                raise ConnectionError("platform unavailable")
            self.posted.append(f"part {index}")
            await progress.part_sent(index + 1)
        return "message-1"

    async def notice(self, origin: Origin, text: str) -> None:
        return None


async def test_each_part_goes_out_with_the_earlier_ones_recorded(engine: Engine) -> None:
    sink = PartedSink(engine.store.db)
    engine.router.register_sink("chat", sink)
    sub = await engine.router.submit(Inbound(CHAT, "dc-1", "hello"))
    assert (await engine.router.wait(sub.task_hash, 10)).status == "done"
    assert sink.seen_before_part == [(0, 0, 1), (1, 1, 2), (2, 2, 3)]
    [item] = await outbox_of_task(engine.store.db, sub.task_hash)
    assert (item.status, item.parts_sent, item.parts_attempted) == ("delivered", PARTS, PARTS)
    assert sink.posted == [f"part {i}" for i in range(PARTS)]


async def test_a_failed_attempt_records_the_parts_out_before_it(
    engine: Engine, clock: FakeClock
) -> None:
    sink = PartedSink(engine.store.db)
    sink.fail_on = 2
    engine.router.register_sink("chat", sink)
    sub = await engine.router.submit(Inbound(CHAT, "dc-2", "hello"))
    # The retry waits on the engine's clock: time moves past that wait as soon as it starts.
    ended = await clock.past_backoffs(engine.router.wait(sub.task_hash, 10), under=2)
    assert ended.status == "done"
    # The retry goes on from the refused part, with the two before it recorded as out.
    assert sink.seen_before_part == [(0, 0, 1), (1, 1, 2), (2, 2, 3), (2, 2, 3)]
    assert sink.posted == [f"part {i}" for i in range(PARTS)]
    [item] = await outbox_of_task(engine.store.db, sub.task_hash)
    assert (item.status, item.attempts, item.parts_sent) == ("delivered", 2, PARTS)
