"""The connections the lean statements run on: a small pool of asyncpg connections, kept here.

asyncpg's own pool pays for every checkout with more than the statement it lends a connection
for: a task and a timer for the acquire's timeout, a shielded task for the release, and an idle
timer re-armed each time. A message takes about seven checkouts on PostgreSQL, and that
machinery was a large part of the event loop's time per message. Here a checkout with a
connection free is a `list.pop()` and a return is a `list.append()`; only a caller that has to
wait for a connection gets a future and a timeout.

A connection goes back to the pool only when it is as good as new: open, outside a
transaction, and not cancelling a statement (a unit of work cancelled in the middle of one).
Any other is closed at once and a new one opened when needed. A connection the server ended
without the client noticing yet fails its next round trip; `pg_lean` runs the work again on
another one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import Any

# A connection nobody took for this long is closed (at the next return of another: the
# gateway's own polls return one several times a second), as asyncpg's pool did.
IDLE_LIFETIME = 300.0


class PoolClosed(RuntimeError):
    """A checkout from a pool that is closing."""


class PgConnections:
    """At most `size` open connections to `dsn`, opened on first need."""

    def __init__(
        self,
        dsn: str,
        size: int,
        *,
        acquire_timeout: float,
        statement_cache: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dsn = dsn
        self._size = size
        self._acquire_timeout = acquire_timeout
        self._statement_cache = statement_cache
        self._clock = clock
        # Free connections with when each came back, the most recently returned last.
        self._idle: list[tuple[Any, float]] = []
        self._closing_idle: set[asyncio.Task[None]] = set()
        self._lent: set[Any] = set()
        # Connections open, lent out or being opened: what `size` bounds.
        self._slots = 0
        # Callers waiting for a connection: each is handed one, or None to open one itself.
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._closing = False
        self._all_back: asyncio.Event | None = None

    async def acquire(self) -> Any:
        if self._closing:
            raise PoolClosed("the database pool is closing")
        while self._idle:
            conn, _ = self._idle.pop()  # the most recently used: its statements are prepared
            if not conn.is_closed():
                self._lent.add(conn)
                return conn
            self._slots -= 1
        if self._slots < self._size:
            self._slots += 1
            return await self._open()
        return await self._wait()

    def release(self, conn: Any) -> None:
        """Take `conn` back: to the next waiter or the idle list if it is as good as new,
        otherwise closed (its slot goes to the next waiter)."""
        self._lent.discard(conn)
        if self._closing or not _reusable(conn):
            conn.terminate()
            self._slots -= 1
            self._hand_on(None)
        else:
            self._hand_on(conn)
        if self._all_back is not None and not self._lent:
            self._all_back.set()

    async def close(self, patience: float) -> bool:
        """Close every connection, waiting up to `patience` seconds for those lent out, then cutting
        them; False when some had to be cut."""
        self._closing = True
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(PoolClosed("the database pool is closing"))
        self._waiters.clear()
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), patience)
        await asyncio.gather(*self._closing_idle, return_exceptions=True)
        if not self._lent:
            return True
        self._all_back = asyncio.Event()
        try:
            await asyncio.wait_for(self._all_back.wait(), patience)
            return True
        except TimeoutError:
            for conn in list(self._lent):
                conn.terminate()
            self._lent.clear()
            return False

    # -- the slow paths ---------------------------------------------------------------------

    async def _open(self) -> Any:
        """Open a connection in a slot this caller holds; the slot is given up if it fails."""
        import asyncpg  # type: ignore[import-untyped]

        try:
            conn = await asyncpg.connect(
                self._dsn,
                timeout=self._acquire_timeout,
                statement_cache_size=self._statement_cache,
            )
        except BaseException:
            self._slots -= 1
            self._hand_on(None)  # a waiter may have better luck
            raise
        if self._closing:
            conn.terminate()
            self._slots -= 1
            raise PoolClosed("the database pool is closing")
        self._lent.add(conn)
        return conn

    async def _wait(self) -> Any:
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self._acquire_timeout):
                conn = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Handed a connection (or a slot) just as the wait ended: pass it on.
                handed = waiter.result()
                if handed is None:
                    self._slots -= 1
                    self._hand_on(None)
                else:
                    self.release(handed)
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise
        if conn is None:
            return await self._open()  # the slot handed over is this caller's
        return conn

    def _hand_on(self, conn: Any | None) -> None:
        """Give `conn`, or with None a free slot, to the longest waiter; else keep `conn` idle
        (a free slot needs nobody to keep it)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            if conn is None:
                self._slots += 1
            else:
                self._lent.add(conn)
            waiter.set_result(conn)
            return
        if conn is not None:
            now = self._clock()
            self._idle.append((conn, now))
            oldest, since = self._idle[0]
            if now - since > IDLE_LIFETIME:
                del self._idle[0]
                self._slots -= 1
                self._close_later(oldest)

    def _close_later(self, conn: Any) -> None:
        closing = asyncio.ensure_future(_close_quietly(conn))
        self._closing_idle.add(closing)
        closing.add_done_callback(self._closing_idle.discard)


async def _close_quietly(conn: Any) -> None:
    try:
        await asyncio.wait_for(conn.close(), 5.0)
    except Exception:
        conn.terminate()


def _reusable(conn: Any) -> bool:
    """Whether a returned connection can serve the next unit as if new."""
    if conn.is_closed() or conn.is_in_transaction():
        return False
    # A unit cancelled during a statement leaves asyncpg cancelling it on the server; asyncpg's
    # own pool asks the same. Without a way to ask, the connection is not trusted.
    cancelling = getattr(getattr(conn, "_protocol", None), "_is_cancelling", None)
    return cancelling is not None and not cancelling()
