"""Lean statements on PostgreSQL, straight on asyncpg connections (`pg_pool`).

Through SQLAlchemy's async engine each unit of lean work paid for a pool checkout with a
liveness ping, the adapter's connection wrappers, and for a read a BEGIN and a ROLLBACK: four
round trips and more Python than the statements themselves. Here a write is BEGIN, its
statements and COMMIT on a pooled connection, and a read is its statements alone: under READ
COMMITTED (PostgreSQL's default) every statement takes its own snapshot even inside a
transaction, so a transaction around a read buys nothing.

The work stays a plain function of a `Lean` (the same one SQLite runs on a thread of its own):
it runs in a greenlet, and each statement hands its coroutine to the event loop.

A connection the server closed (a restart, an administrator) is seen by the pool, which opens a
new one on the next checkout. One whose end was not seen yet fails its first round trip: a read
is then run again on a new connection, and so is a write whose BEGIN failed, or whose connection
ended before its COMMIT was sent (the server kept nothing of it): what a ping before every
checkout would buy, without its round trip. A write whose COMMIT was cut is not run again: it
may have landed. No connection to be had (the server refuses, or the pool stays busy past
`ACQUIRE_TIMEOUT`) raises `DatabaseUnavailable`. The connections are kept by `pg_pool`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy.util import await_only, greenlet_spawn

from gateway.logs import get_logger
from gateway.store.errors import DatabaseUnavailable, OutcomeUnknown
from gateway.store.lean import Lean, Row, in_dialect
from gateway.store.pg_pool import PgConnections, PoolClosed

log = get_logger(__name__)

T = TypeVar("T")

ACQUIRE_TIMEOUT = 30.0  # waiting for a connection of the pool, or for a new one to open
CLOSE_TIMEOUT = 5.0  # a connection still lent out after this is cut rather than waited for
# Distinct statements a connection keeps prepared: the lean ones, with room to spare.
STATEMENT_CACHE = 256


class PgLean(Lean):
    """A `Lean` whose statements run on one asyncpg connection (inside a greenlet)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:  # no DBAPI cursor: statements go to `conn`
        self._conn = conn
        self.dialect = "postgresql"

    def one(self, sql: str, *params: Any) -> Row | None:
        row = await_only(self._conn.fetchrow(in_dialect("postgresql", sql), *params))
        return tuple(row) if row is not None else None

    def all(self, sql: str, *params: Any) -> list[Row]:
        rows = await_only(self._conn.fetch(in_dialect("postgresql", sql), *params))
        return [tuple(row) for row in rows]

    def run(self, sql: str, *params: Any) -> int:
        status: str = await_only(self._conn.execute(in_dialect("postgresql", sql), *params))
        # "INSERT 0 1", "UPDATE 3", "DELETE 0": the count is the last word (none for others).
        last = status.rpartition(" ")[2]
        return int(last) if last.isdigit() else -1

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await_only(self._conn.executemany(in_dialect("postgresql", sql), rows))


def _again_or_raise(conn: Any, exc: Exception, *, last: bool, doing: str) -> None:
    """After `exc` on a unit's first round trip: return to run the unit again on another
    connection (this one ended), or raise."""
    if not _ended(conn):
        raise exc
    if last:
        raise DatabaseUnavailable("the database ended the connection") from exc
    log.info(f"database connection was closed; {doing} again on a new one")


def _ended(conn: Any) -> bool:
    """Whether the connection lent out closed (the error was its end, not the statement's)."""
    try:
        return bool(conn.is_closed())
    except Exception:  # the pool takes back a connection that closes: the lent one is gone too
        return True


class PgLeanPool:
    """The pool the lean reads and writes of one database run on, opened on first use."""

    def __init__(self, dsn: str, size: int) -> None:
        self._connections = PgConnections(
            dsn, size, acquire_timeout=ACQUIRE_TIMEOUT, statement_cache=STATEMENT_CACHE
        )

    async def read(self, work: Callable[[Lean], T]) -> T:
        for last in (False, True):
            async with self._lent() as conn:
                try:
                    result: T = await greenlet_spawn(work, PgLean(conn))
                except Exception as exc:
                    _again_or_raise(conn, exc, last=last, doing="reading")
                    continue
                return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def write(self, work: Callable[[Lean], T]) -> T:
        for last in (False, True):
            async with self._lent() as conn:
                transaction = conn.transaction()
                try:
                    await transaction.start()
                except Exception as exc:
                    _again_or_raise(conn, exc, last=last, doing="writing")
                    continue
                try:
                    result: T = await greenlet_spawn(work, PgLean(conn))
                except BaseException as exc:
                    # A failed rollback leaves the connection to the pool's reset on release.
                    with contextlib.suppress(Exception):
                        await transaction.rollback()
                    if not isinstance(exc, Exception):
                        raise
                    # Ended before the COMMIT was sent: the server kept nothing of it, so it
                    # runs again on another connection, as if its BEGIN had failed.
                    _again_or_raise(conn, exc, last=last, doing="writing")
                    continue
                try:
                    await transaction.commit()
                except Exception as exc:
                    if not _ended(conn):
                        raise  # refused by the server, which kept nothing of it
                    raise OutcomeUnknown(f"the connection ended during a COMMIT: {exc!r}") from exc
                return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def write_one(
        self, statement: str, params: Sequence[Any], *, repeatable: bool
    ) -> list[Row]:
        """One statement, which PostgreSQL commits on its own: no BEGIN and no COMMIT, so one
        round trip where a transaction of the same work takes several. A connection that ends
        under it may have committed it: with `repeatable` (running it twice does what running
        it once does) it runs again on another connection, else `OutcomeUnknown`."""
        for last in (False, True):
            async with self._lent() as conn:
                try:
                    rows = await conn.fetch(in_dialect("postgresql", statement), *params)
                except Exception as exc:
                    if _ended(conn) and not repeatable:
                        raise OutcomeUnknown(
                            f"the connection ended under a write: {exc!r}"
                        ) from exc
                    _again_or_raise(conn, exc, last=last, doing="writing")
                    continue
                return [tuple(row) for row in rows]
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def _lent(self) -> AsyncIterator[Any]:
        """A connection of the pool for one unit of work."""
        try:
            conn = await self._connections.acquire()
        except (OSError, TimeoutError) as exc:
            raise DatabaseUnavailable(f"the database cannot be reached: {exc!r}") from exc
        except PoolClosed as exc:
            raise DatabaseUnavailable(str(exc)) from exc
        except Exception as exc:  # the server refused us: gone, shutting down, too many
            if type(exc).__module__.startswith("asyncpg"):
                raise DatabaseUnavailable(f"the database refused a connection: {exc!r}") from exc
            raise
        try:
            yield conn
        finally:
            self._connections.release(conn)

    async def close(self) -> None:
        if not await self._connections.close(CLOSE_TIMEOUT):
            log.warning("database connections still in use at close; cutting them")
