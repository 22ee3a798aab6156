"""Leases on PostgreSQL advisory locks: one holder at a time, let go on release, on close and
when the holder's connection dies; and a runtime that loses its connection stops its
sessions' tasks, which another runtime then takes up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
from conftest import PG_ADMIN_DSN, Backends
from sqlalchemy.engine import make_url
from support import wait_until

from gateway.clock import SYSTEM_CLOCK
from gateway.events import Inbound, Origin
from gateway.leadership import Leadership, if_leading
from gateway.leases import PostgresLeases, open_leases
from gateway.runtime import Runtime
from gateway.settings import Settings

ANN = Origin("http", sender_id="ann", sender_name="Ann", window_hash="w1")


@pytest.fixture
async def database() -> AsyncIterator[str]:
    backends = Backends(postgres=True)
    try:
        backend = await backends.new()  # skips (or fails in CI) without PostgreSQL
        yield backend["AGENVOY_DATABASE_URL"]
    finally:
        await backends.drop()


async def leases_on(url: str, instance: str, ttl: float = 3.0) -> PostgresLeases:
    leases = await open_leases(url, instance, ttl, SYSTEM_CLOCK)
    assert isinstance(leases, PostgresLeases)
    return leases


@contextlib.asynccontextmanager
async def two_instances(
    database: str, ttl: float
) -> AsyncIterator[tuple[PostgresLeases, PostgresLeases]]:
    """Two instances' leases on one database (closing one twice is fine: a test may)."""
    a, b = await leases_on(database, "a", ttl), await leases_on(database, "b", ttl)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


@pytest.fixture
async def pair(database: str) -> AsyncIterator[tuple[PostgresLeases, PostgresLeases]]:
    async with two_instances(database, 3.0) as leases:
        yield leases


@pytest.fixture
async def quick_pair(database: str) -> AsyncIterator[tuple[PostgresLeases, PostgresLeases]]:
    """A 0.6 s TTL, for tests that wait for a lost connection to be noticed."""
    async with two_instances(database, 0.6) as leases:
        yield leases


async def terminate(application_name: str, database: str) -> int:
    """End the server side of every connection by that name to the test's own database, as a
    lost network would (tests in other workers use the same names on their databases)."""
    conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=3)
    try:
        rows = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = $1 AND datname = $2",
            application_name,
            make_url(database).database,
        )
    finally:
        await conn.close()
    return len(rows)


async def test_one_holder_at_a_time_until_released_or_closed(
    pair: tuple[PostgresLeases, PostgresLeases],
) -> None:
    a, b = pair
    assert await a.acquire("session:x")
    assert await a.acquire("session:x")  # held already
    assert not await b.acquire("session:x")
    assert await b.acquire("session:y")  # another name is free
    await a.release("session:x")
    assert not a.holds("session:x")
    assert await b.acquire("session:x")
    await b.close()  # a closing instance lets everything go
    assert await a.acquire("session:x") and await a.acquire("session:y")


async def test_a_lost_connection_gives_every_lease_up_and_comes_back(
    quick_pair: tuple[PostgresLeases, PostgresLeases], database: str
) -> None:
    a, b = quick_pair
    lost: list[frozenset[str]] = []
    a.on_lost(lost.append)
    assert await a.acquire("session:x") and await a.acquire("poller")
    assert await terminate("agenvoy-leases:a", database) == 1
    # The server lets the locks go with the connection; a notices within the TTL.
    assert await wait_until(lambda: b.acquire("session:x"), 3)
    assert await wait_until(lambda: _true(bool(lost)), 3)
    assert lost == [frozenset({"session:x", "poller"})]
    assert not a.holds("session:x")
    # Connected again: a can take what nobody holds.
    assert await wait_until(lambda: a.acquire("poller"), 3)
    assert not await a.acquire("session:x")


async def _true(value: bool) -> bool:
    return value


def settings_for(home: Path, instance: str, url: str) -> Settings:
    return Settings(
        home=home,
        instance_id=instance,
        database_url=url,
        lease_ttl_seconds=1.5,  # a loaded machine must not lose a lease the test keeps
        _env_file=None,
    )


@pytest.fixture
async def runtimes(tmp_path: Path, database: str) -> AsyncIterator[tuple[Runtime, Runtime]]:
    """Two gateways' runtimes on one database (without Redis: no signal crosses them). A
    test may close one itself: closing again does nothing."""
    first = await Runtime.start(settings_for(tmp_path / "one", "one", database))
    second = await Runtime.start(settings_for(tmp_path / "two", "two", database))
    try:
        yield first, second
    finally:
        await second.close()
        await first.close()


async def test_a_runtime_that_loses_its_connection_stops_and_another_takes_over(
    runtimes: tuple[Runtime, Runtime], database: str
) -> None:
    first, second = runtimes
    sub = await first.router.submit(Inbound(ANN, "chat-x", "!confirm go"))
    await first.router.wait(sub.task_hash, 10, until_prompt=True)
    assert await second.router.recover() == 0  # first holds the session
    assert await terminate("agenvoy-leases:one", database) == 1

    # First notices within the TTL and stops the task (its journal stays)...
    async def given_up() -> bool:
        # Its task back to queued, to follow the instance that takes it up.
        status = (await first.router.find(sub.task_hash)).status
        return not first.router.is_busy("chat-x") and status == "queued"

    assert await wait_until(given_up, 3)
    # ...and second finds it nobody's and takes it.
    assert await wait_until(lambda: _taken(second), 5)
    await second.router.wait(sub.task_hash, 10, until_prompt=True)
    await second.router.answer("chat-x", sub.task_hash, ANN, approve=True)
    assert (await second.router.wait(sub.task_hash, 10)).reply == "approved: go"


async def _taken(runtime: Runtime) -> bool:
    await runtime.router.recover()
    return runtime.router.is_busy("chat-x")


async def test_closing_hands_a_session_to_another_runtime_at_once(
    runtimes: tuple[Runtime, Runtime],
) -> None:
    first, second = runtimes
    sub = await first.router.submit(Inbound(ANN, "chat-x", "!confirm go"))
    await first.router.wait(sub.task_hash, 10, until_prompt=True)
    await first.close()
    assert await second.router.recover() == 1
    await second.router.wait(sub.task_hash, 10, until_prompt=True)


async def test_a_view_that_missed_the_end_of_a_task_asks_the_journal(
    runtimes: tuple[Runtime, Runtime],
) -> None:
    """Without Redis no event crosses instances: the second runtime's view of a task the
    first ran never hears it end, and finds out from the journal when asked again."""
    first, second = runtimes
    slow = await first.router.submit(Inbound(ANN, "chat-v", "!confirm go"))
    await first.router.wait(slow.task_hash, 10, until_prompt=True)  # first owns chat-v
    sub = await second.router.submit(Inbound(ANN, "chat-v", "hello"))
    assert (await second.router.find(sub.task_hash)).status == "queued"  # a view
    await first.router.answer("chat-v", slow.task_hash, ANN, approve=True)
    await first.router.recover()  # the periodic check finds what second stored
    done = await first.router.wait(sub.task_hash, 10)
    assert done.reply == "echo: hello"
    seen = await second.router.find(sub.task_hash)  # its end, as the archive has it
    assert (seen.status, seen.reply) == ("done", "echo: hello")


async def test_a_job_runs_on_the_instance_holding_its_lease(
    pair: tuple[PostgresLeases, PostgresLeases],
) -> None:
    a, b = pair
    ran: list[str] = []

    def job(name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            ran.append(name)

        return run

    for _ in range(2):
        await if_leading(a, "job:cleanup", job("a"))
        await if_leading(b, "job:cleanup", job("b"))
    assert ran == ["a", "a"]  # a keeps the job while it lives
    await a.close()
    await if_leading(b, "job:cleanup", job("b"))
    assert ran == ["a", "a", "b"]


async def test_leadership_moves_when_the_leader_loses_its_connection(
    quick_pair: tuple[PostgresLeases, PostgresLeases], database: str
) -> None:
    a, b = quick_pair
    working: set[str] = set()

    def leader(leases: PostgresLeases, name: str) -> Leadership:
        async def start() -> None:
            working.add(name)

        async def stop() -> None:
            working.discard(name)

        return Leadership(
            leases, "telegram:poller", SYSTEM_CLOCK, retry_seconds=0.1, start=start, stop=stop
        )

    first, second = leader(a, "a"), leader(b, "b")
    try:
        first.begin()
        assert await wait_until(lambda: _true(working == {"a"}), 3)
        second.begin()
        assert not await wait_until(lambda: _true(working != {"a"}), 0.5)  # b waits its turn
        assert await terminate("agenvoy-leases:a", database) == 1
        # a stops within the TTL; b takes over once the server has let the lock go.
        assert await wait_until(lambda: _true(working == {"b"}), 3)
        await second.end()
        assert working == set()
        assert await wait_until(lambda: _true(working == {"a"}), 3)  # a, connected again
    finally:
        await first.end()
        await second.end()


async def test_an_idle_session_lease_lingers_then_goes_and_closing_lets_it_go(
    runtimes: tuple[Runtime, Runtime],
) -> None:
    from gateway.cluster.ownership import LINGER_SECONDS, lease_of

    first, second = runtimes
    sub = await first.router.submit(Inbound(ANN, "chat-l", "hello"))
    assert (await first.router.wait(sub.task_hash, 10)).reply == "echo: hello"
    # Idle, yet still first's for a moment: a chat that writes again soon pays nothing.
    assert first.leases.holds(lease_of("chat-l"))
    assert not await second.leases.acquire(lease_of("chat-l"))
    # Then let go, so that any instance can run the session.
    assert await wait_until(lambda: second.leases.acquire(lease_of("chat-l")), LINGER_SECONDS + 5)
    await second.leases.release(lease_of("chat-l"))

    sub = await first.router.submit(Inbound(ANN, "chat-l", "again"))
    await first.router.wait(sub.task_hash, 10)
    assert first.leases.holds(lease_of("chat-l"))  # lingering again
    await first.close()  # shutting down does not wait out the linger
    assert await second.leases.acquire(lease_of("chat-l"))


async def test_a_lease_asked_for_after_the_connection_died_connects_again_at_once(
    database: str,
) -> None:
    """The watchdog looks only every third of the TTL: a lease asked for in between, on a
    connection known to be dead, connects again there and then instead of being refused."""
    leases = await leases_on(database, "a", ttl=60.0)  # the watchdog stays out of it
    try:
        lost: list[frozenset[str]] = []
        leases.on_lost(lost.append)
        assert await leases.acquire("session:x")
        assert await terminate("agenvoy-leases:a", database) == 1

        async def noticed() -> bool:
            return bool(leases._conn.is_closed())

        assert await wait_until(noticed, 5)
        assert await leases.acquire("session:y")
        # What the dead connection held was given up (another may hold it by now).
        assert lost == [frozenset({"session:x"})]
        assert not leases.holds("session:x") and leases.holds("session:y")
        assert await leases.acquire("session:x")  # nobody else took it
    finally:
        await leases.close()


class _AnsweredOnCue:
    """An asyncpg connection's face as the watchdog sees it, whose "SELECT 1" answers when
    the test says: the one way to cancel the watchdog at the very moment a check answers."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def fetchval(self, query: str, *args: object) -> int:
        self.asked.set()
        return await self.answer

    def is_closed(self) -> bool:
        return False

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (asyncpg's)
        return None


async def test_closing_ends_the_watchdog_even_as_a_check_answers() -> None:
    """A stop that cancels the watchdog while its health check answers in the same turn of
    the event loop must still end it (on Python 3.11, asyncio.wait_for drops such a
    cancellation, and the stop then waited forever)."""
    leases = PostgresLeases("postgresql://unused", "a", 0.3, SYSTEM_CLOCK)
    conn = _AnsweredOnCue()
    leases._conn = conn
    leases._watch = asyncio.create_task(leases._watchdog())
    await asyncio.wait_for(conn.asked.wait(), 3)
    conn.answer.set_result(1)  # the check's answer and the stop land in one turn
    closing = asyncio.create_task(leases.close())
    try:
        # asyncio.wait, which never cancels what it waits on: close() shields itself.
        done, _ = await asyncio.wait({closing}, timeout=3)
        assert closing in done, "close() still waits for the watchdog"
        assert leases._watch.done()
    finally:
        leases._watch.cancel()
        closing.cancel()
