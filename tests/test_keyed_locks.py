"""Per-key locks: one holder per key at a time, keys side by side, nothing kept once unused."""

from __future__ import annotations

import asyncio

from gateway.keyed_locks import KeyedLocks


async def test_one_holder_per_key_and_none_kept_after() -> None:
    locks = KeyedLocks()
    order: list[str] = []
    inside = asyncio.Event()
    release = asyncio.Event()

    async def first() -> None:
        async with locks.hold("a"):
            order.append("first in")
            inside.set()
            await release.wait()
            order.append("first out")

    async def second() -> None:
        async with locks.hold("a"):
            order.append("second in")

    async def other_key() -> None:
        async with locks.hold("b"):
            order.append("b in")

    one = asyncio.create_task(first())
    await inside.wait()
    two = asyncio.create_task(second())
    await asyncio.wait_for(other_key(), 1)  # another key is not held up
    assert len(locks) == 1  # "a", held and waited for
    release.set()
    await asyncio.wait_for(asyncio.gather(one, two), 1)
    assert order == ["first in", "b in", "first out", "second in"]
    assert len(locks) == 0


async def test_a_failing_holder_lets_the_key_go() -> None:
    locks = KeyedLocks()
    try:
        async with locks.hold("a"):
            raise ValueError("boom")
    except ValueError:
        pass
    assert len(locks) == 0
    async with locks.hold("a"):
        assert len(locks) == 1


async def test_a_waiter_canceled_before_its_turn_lets_the_key_go() -> None:
    locks = KeyedLocks()
    release = asyncio.Event()
    inside = asyncio.Event()

    async def holder() -> None:
        async with locks.hold("a"):
            inside.set()
            await release.wait()

    async def waiter() -> None:
        async with locks.hold("a"):
            raise AssertionError("a canceled waiter never holds the key")

    held = asyncio.create_task(holder())
    await inside.wait()
    waiting = asyncio.create_task(waiter())
    await asyncio.sleep(0)  # let it queue on the lock
    assert len(locks) == 1
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    release.set()
    await asyncio.wait_for(held, 1)
    assert len(locks) == 0
