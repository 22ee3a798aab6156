"""Who may do what alone: a lease per name (a session, the Telegram poller, a background job).

Several gateway instances share one PostgreSQL database; exactly one of them may run a
session's tasks, poll Telegram or reap temp sessions at a time. A lease is a PostgreSQL
advisory lock held on a connection of the instance's own: PostgreSQL lets it go when that
connection ends, so an instance that dies (SIGKILL, a lost network) loses its leases without
anyone's help — within `AGENVOY_LEASE_TTL_SECONDS`, since the connection is set to give up on a
silent peer by then. The instance checks its connection as often and, should it fail, stops
everything it held before another instance can have taken it over.

On SQLite there is one instance (the home lock and the database lock see to that), and every
lease is granted at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from typing import Any, Protocol

from gateway.clock import Clock
from gateway.logs import get_logger

log = get_logger(__name__)

LostHandler = Callable[[frozenset[str]], None]


class Leases(Protocol):
    async def acquire(self, name: str) -> bool:
        """Take the lease if nobody holds it; True if this instance holds it now."""
        ...

    async def release(self, name: str) -> None: ...

    def holds(self, name: str) -> bool: ...

    def on_lost(self, handler: LostHandler) -> None:
        """Call `handler` with every lease name when this instance may have lost them all."""
        ...

    async def healthy(self) -> bool: ...

    async def close(self) -> None: ...


class LocalLeases:
    """One instance only: every lease is this one's."""

    def __init__(self) -> None:
        self._held: set[str] = set()

    async def acquire(self, name: str) -> bool:
        self._held.add(name)
        return True

    async def release(self, name: str) -> None:
        self._held.discard(name)

    def holds(self, name: str) -> bool:
        return name in self._held

    def on_lost(self, handler: LostHandler) -> None:
        """Local leases are never lost."""

    async def healthy(self) -> bool:
        return True

    async def close(self) -> None:
        self._held.clear()


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for `name`, as pg_advisory_lock takes it."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class PostgresLeases:
    """Advisory locks on a connection of this instance's own (not the pool's)."""

    def __init__(self, dsn: str, instance: str, ttl: float, clock: Clock) -> None:
        self.dsn = dsn
        self.instance = instance
        self.ttl = ttl
        self.clock = clock
        self._conn: Any = None
        self._lock = asyncio.Lock()  # one statement at a time on the connection
        self._renewing = asyncio.Lock()  # one reconnection at a time
        self._held: set[str] = set()
        self._lost: list[LostHandler] = []
        self._watch: asyncio.Task[None] | None = None
        self._closing = False

    @classmethod
    async def open(cls, dsn: str, instance: str, ttl: float, clock: Clock) -> PostgresLeases:
        leases = cls(dsn, instance, ttl, clock)
        await leases._connect()
        leases._watch = asyncio.create_task(leases._watchdog(), name="lease-watchdog")
        return leases

    async def _connect(self) -> None:
        import asyncpg  # type: ignore[import-untyped]

        # The server gives up on this connection — and so lets the locks go — once the peer
        # has been silent for about the lease TTL.
        idle = max(1, int(self.ttl / 3))
        self._conn = await asyncpg.connect(
            self.dsn,
            timeout=self.ttl,
            server_settings={
                "application_name": f"agenvoy-leases:{self.instance}"[:63],
                "tcp_keepalives_idle": str(idle),
                "tcp_keepalives_interval": str(idle),
                "tcp_keepalives_count": "2",
                "tcp_user_timeout": str(int(self.ttl * 1000)),
            },
        )

    async def acquire(self, name: str) -> bool:
        if name in self._held:
            return True
        if self._conn.is_closed():
            if self._renewing.locked():
                return False  # being replaced: another instance may take it meanwhile
            # Known dead (the server or the network ended it): connect again now rather than
            # refuse every lease until the watchdog's next look.
            await self._renew(self._conn)
        try:
            async with self._lock:
                got = await self._conn.fetchval("SELECT pg_try_advisory_lock($1)", lock_key(name))
        except Exception as exc:
            log.warning("lease not taken: database unreachable", lease=name, error=repr(exc))
            return False
        if got:
            self._held.add(name)
        return bool(got)

    async def release(self, name: str) -> None:
        if name not in self._held:
            return
        self._held.discard(name)
        with contextlib.suppress(Exception):
            async with self._lock:
                await self._conn.fetchval("SELECT pg_advisory_unlock($1)", lock_key(name))

    def holds(self, name: str) -> bool:
        return name in self._held

    def on_lost(self, handler: LostHandler) -> None:
        self._lost.append(handler)

    async def healthy(self) -> bool:
        try:
            async with self._lock:
                # asyncio.timeout, not asyncio.wait_for: on Python 3.11 a wait_for whose query
                # answers just as its caller is canceled returns the answer and loses the
                # cancellation, and a stop that cancels the watchdog then waits forever.
                async with asyncio.timeout(self.ttl / 3):
                    await self._conn.fetchval("SELECT 1")
        except Exception:
            return False
        return True

    async def _watchdog(self) -> None:
        """Check the connection every third of the TTL; if it fails, whatever this instance
        held may soon be another's: give it all up at once, and connect again."""
        while not self._closing:
            await self.clock.sleep(self.ttl / 3)
            checked = self._conn
            if not await self.healthy():
                await self._renew(checked)

    async def _renew(self, failed: Any) -> None:
        """The connection `failed`: give up what it held and connect again — unless another
        caller has already replaced it meanwhile."""
        async with self._renewing:
            if self._conn is not failed:
                return
            lost, self._held = frozenset(self._held), set()
            log.error("lease connection lost; giving up every lease", leases=len(lost))
            for handler in self._lost:
                handler(lost)
            with contextlib.suppress(Exception):
                await failed.close(timeout=1)
            try:
                await self._connect()
            except Exception as exc:
                log.warning("lease connection not back yet", error=repr(exc))

    async def close(self) -> None:
        """Let every lease go now (a clean shutdown hands sessions over at once)."""
        self._closing = True  # a cancellation lost on the way still ends the watch's loop
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        self._held.clear()
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=5)


async def open_leases(database_url: str, instance: str, ttl: float, clock: Clock) -> Leases:
    """PostgreSQL advisory locks for a PostgreSQL archive; local leases for SQLite."""
    scheme = database_url.partition("://")[0].lower()
    if not scheme.startswith("postgres"):
        return LocalLeases()
    dsn = "postgresql://" + database_url.partition("://")[2]
    return await PostgresLeases.open(dsn, instance, ttl, clock)
