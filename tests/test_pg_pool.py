"""The connections lean statements run on (`gateway.store.pg_pool`): a connection comes back
for the next unit only when it is as good as new, no more than `size` are ever open, a caller
who has to wait is served in turn or times out, and closing cuts what is not handed back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import PG_ADMIN_DSN
from support import skip_or_fail, wait_until

from gateway.store.pg_pool import IDLE_LIFETIME, PgConnections, PoolClosed


def _pool(size: int, *, acquire_timeout: float = 10.0) -> PgConnections:
    return PgConnections(PG_ADMIN_DSN, size, acquire_timeout=acquire_timeout, statement_cache=16)


@pytest.fixture
async def pool() -> AsyncIterator[PgConnections]:
    connections = _pool(2)
    try:
        conn = await connections.acquire()
    except OSError as exc:
        skip_or_fail(f"PostgreSQL not reachable at {PG_ADMIN_DSN}: {exc}")
        raise
    connections.release(conn)
    try:
        yield connections
    finally:
        await connections.close(5.0)


async def _pid(pool: PgConnections) -> int:
    conn = await pool.acquire()
    try:
        return int(await conn.fetchval("SELECT pg_backend_pid()"))
    finally:
        pool.release(conn)


async def test_a_connection_is_lent_again_after_a_unit_that_ended_well(
    pool: PgConnections,
) -> None:
    first = await _pid(pool)
    assert await _pid(pool) == first


async def test_a_connection_left_in_a_transaction_is_closed_not_lent_again(
    pool: PgConnections,
) -> None:
    conn = await pool.acquire()
    before = int(await conn.fetchval("SELECT pg_backend_pid()"))
    await conn.execute("BEGIN")
    pool.release(conn)
    assert conn.is_closed()
    assert await _pid(pool) != before


async def test_a_unit_cancelled_in_the_middle_of_a_statement_does_not_hand_its_connection_on(
    pool: PgConnections,
) -> None:
    conn = await pool.acquire()
    before = int(await conn.fetchval("SELECT pg_backend_pid()"))

    async def unit() -> None:
        try:
            await conn.execute("SELECT pg_sleep(30)")
        finally:
            pool.release(conn)

    running = asyncio.create_task(unit())
    await asyncio.sleep(0.2)  # the statement is on the server
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    # The next unit gets a fresh connection that answers at once, not the one still cancelling.
    async with asyncio.timeout(5):
        assert await _pid(pool) != before


async def test_never_more_than_size_open_and_waiters_are_served_in_turn(
    pool: PgConnections,
) -> None:
    busy = 0
    most = 0
    order: list[int] = []

    async def unit(number: int) -> None:
        nonlocal busy, most
        conn = await pool.acquire()
        busy += 1
        most = max(most, busy)
        order.append(number)
        try:
            await conn.execute("SELECT pg_sleep(0.05)")
        finally:
            busy -= 1
            pool.release(conn)

    await asyncio.gather(*(unit(n) for n in range(8)))
    assert most == 2
    assert order == list(range(8))


async def test_a_caller_waiting_past_the_timeout_gives_up_and_loses_nobody_a_slot() -> None:
    pool = _pool(1, acquire_timeout=0.3)
    try:
        try:
            held = await pool.acquire()
        except OSError as exc:
            skip_or_fail(f"PostgreSQL not reachable at {PG_ADMIN_DSN}: {exc}")
            raise
        with pytest.raises(TimeoutError):
            await pool.acquire()
        # A waiter cancelled by its caller gives up its place too.
        waiting = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        pool.release(held)
        async with asyncio.timeout(2):
            again = await pool.acquire()
        assert again is held  # the one connection, handed to the next caller
        pool.release(again)
    finally:
        await pool.close(5.0)


async def test_a_connection_that_failed_to_open_hands_its_slot_to_the_next_caller() -> None:
    refused = PgConnections(
        "postgresql://postgres@127.0.0.1:1/none", 1, acquire_timeout=2.0, statement_cache=16
    )
    for _ in range(3):  # each failure gave the one slot back
        with pytest.raises(OSError):
            await refused.acquire()
    await refused.close(1.0)


async def test_closing_waits_for_lent_connections_then_cuts_them(pool: PgConnections) -> None:
    lent: Any = await pool.acquire()
    closing = asyncio.create_task(pool.close(0.3))
    with pytest.raises(PoolClosed):
        await pool.acquire()
    assert await closing is False  # nobody handed it back in time
    assert lent.is_closed()


async def test_a_connection_nobody_took_for_the_idle_lifetime_is_closed() -> None:
    now = [0.0]
    pool = PgConnections(
        PG_ADMIN_DSN, 2, acquire_timeout=10.0, statement_cache=16, clock=lambda: now[0]
    )
    try:
        try:
            first, second = await pool.acquire(), await pool.acquire()
        except OSError as exc:
            skip_or_fail(f"PostgreSQL not reachable at {PG_ADMIN_DSN}: {exc}")
            raise
        pool.release(first)
        pool.release(second)
        now[0] = IDLE_LIFETIME - 1
        in_use = await pool.acquire()  # the most recently returned: `second`
        assert in_use is second
        pool.release(in_use)
        assert not first.is_closed()  # not idle for long enough yet
        now[0] = IDLE_LIFETIME + 1
        again = await pool.acquire()
        pool.release(again)  # `first` has waited past its lifetime behind it

        async def closed() -> bool:
            return bool(first.is_closed())

        assert await wait_until(closed, within=5)
        assert not second.is_closed()
        # Its slot is free again: two can be lent at once.
        both = [await pool.acquire(), await pool.acquire()]
        assert first not in both
        for conn in both:
            pool.release(conn)
    finally:
        await pool.close(5.0)
