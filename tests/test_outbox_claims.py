"""Outbox entries claimed before sending: with several instances, one of them sends each
entry; a claim left by an instance that died lapses; a delivered entry is never claimed."""

from __future__ import annotations

import asyncio

from gateway.store.outbox import OutboxEntry
from gateway.store.sessions import SessionStore


async def entry_in(store: SessionStore) -> int:
    await store.ensure("chat-a")
    entry = OutboxEntry("chat-a", "t1", 0, "text", "telegram", {"event": {"text": "hi"}})
    item = await store.outbox.claim(entry)
    return item.id


async def test_one_instance_at_a_time_holds_an_entry(store: SessionStore) -> None:
    item_id = await entry_in(store)
    mine = await store.outbox.take(item_id, "gw-1", 60_000)
    assert mine is not None and mine.id == item_id
    assert await store.outbox.take(item_id, "gw-2", 60_000) is None
    # The holder again (a restarted instance keeps its id): still its own.
    assert await store.outbox.take(item_id, "gw-1", 60_000) is not None


async def test_a_lapsed_claim_can_be_taken(store: SessionStore) -> None:
    item_id = await entry_in(store)
    assert await store.outbox.take(item_id, "gw-1", -1) is not None  # lapsed at once
    assert await store.outbox.take(item_id, "gw-2", 60_000) is not None
    assert await store.outbox.take(item_id, "gw-1", 60_000) is None


async def test_a_delivered_entry_is_not_taken(store: SessionStore) -> None:
    item_id = await entry_in(store)
    await store.outbox.mark_delivered(item_id, "m1")
    assert await store.outbox.take(item_id, "gw-1", 60_000) is None


async def test_of_many_claims_at_once_one_wins(store: SessionStore) -> None:
    item_id = await entry_in(store)
    won = await asyncio.gather(*(store.outbox.take(item_id, f"gw-{n}", 60_000) for n in range(8)))
    assert sum(item is not None for item in won) == 1
