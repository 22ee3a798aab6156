"""Token spend per model call, its retention, and per-model summaries."""

from __future__ import annotations

import calendar
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, case, delete, func, or_
from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from gateway.clock import now_ms
from gateway.ids import validate_session_id
from gateway.store.db import Database
from gateway.store.lean import Lean
from gateway.store.models import UsageRow

DAY_MS = 86_400_000
SHARED_PREFIXES = ("dc-", "tg-")  # the shared chats' sessions (gateway.ownership)


def month_start(at: int) -> int:
    """00:00 UTC of the first day of the month `at` (Unix ms) falls in."""
    day = datetime.fromtimestamp(at / 1000, UTC)
    return calendar.timegm((day.year, day.month, 1, 0, 0, 0)) * 1000


# A lean statement (gateway.store.lean): one per model call.
_INSERT_USAGE = (
    "INSERT INTO usage (session_id, model, input, output, cache_read, cache_write, elapsed_ms,"
    " tool_calls, send_at, task_hash, identity, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " RETURNING id"
)


@dataclass(frozen=True, slots=True)
class UsageRecord:
    session_id: str
    model: str
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    elapsed_ms: int = 0
    tool_calls: Sequence[str] = field(default_factory=tuple)
    send_at: int | None = None
    task_hash: str = ""  # the task it was spent for (a subagent's: its parent task)
    identity: str = ""  # whom: the requester of that task (`platform:sender id`)
    # US dollars, from the price table when the row was written (gateway/prices.py); None
    # when no price table was set.
    cost: float | None = None


@dataclass(frozen=True, slots=True)
class ModelUsage:
    model: str
    calls: int
    input: int
    output: int
    cache_read: int
    cache_write: int
    elapsed_ms: int
    # Output tokens per second over the calls that measured their time (elapsed_ms > 0).
    output_tps: float
    cost: float | None = None  # US dollars; None when none of the calls was priced


def insert_usage(sql: Lean, record: UsageRecord) -> int:
    """Add the usage row in the caller's transaction; returns its id."""
    row_id = sql.value(_INSERT_USAGE, *usage_values(record).values())
    assert row_id is not None
    return int(row_id)


def usage_values(record: UsageRecord) -> dict[str, object]:
    # In the column order of _INSERT_USAGE.
    return {
        "session_id": record.session_id,
        "model": record.model,
        "input": record.input,
        "output": record.output,
        "cache_read": record.cache_read,
        "cache_write": record.cache_write,
        "elapsed_ms": record.elapsed_ms,
        "tool_calls": json.dumps(list(record.tool_calls)),
        "send_at": record.send_at if record.send_at is not None else now_ms(),
        "task_hash": record.task_hash,
        "identity": record.identity,
        "cost": record.cost,
    }


def _sums(timed: Any) -> list[Any]:
    return [
        func.count(),
        func.sum(col(UsageRow.input)),
        func.sum(col(UsageRow.output)),
        func.sum(col(UsageRow.cache_read)),
        func.sum(col(UsageRow.cache_write)),
        func.sum(col(UsageRow.elapsed_ms)),
        func.sum(case((timed, col(UsageRow.output)), else_=0)).cast(BigInteger),
        func.sum(case((timed, col(UsageRow.elapsed_ms)), else_=0)).cast(BigInteger),
        func.sum(col(UsageRow.cost)),
    ]


def _usage(model: str, sums: Sequence[Any]) -> ModelUsage:
    calls, inp, out, c_read, c_write, elapsed, timed_out, timed_ms, cost = sums
    return ModelUsage(
        model=model,
        calls=int(calls),
        input=int(inp or 0),
        output=int(out or 0),
        cache_read=int(c_read or 0),
        cache_write=int(c_write or 0),
        elapsed_ms=int(elapsed or 0),
        output_tps=(timed_out or 0) / (timed_ms / 1000) if timed_ms else 0.0,
        cost=None if cost is None else float(cost),
    )


@dataclass(frozen=True, slots=True)
class IdentityUsage:
    identity: str  # "" for calls made before identities were kept
    calls: int
    input: int
    output: int
    cost: float | None = None  # US dollars; None when none of the calls was priced


@dataclass(frozen=True, slots=True)
class ChatUsage:
    session_id: str  # a shared chat: dc-*, tg-*
    calls: int
    input: int
    output: int
    cost: float | None = None  # US dollars; None when none of the calls was priced


@dataclass(frozen=True, slots=True)
class Spent:
    """What a budget is held against: input + output tokens, and US dollars."""

    tokens: int
    cost: float


@dataclass(frozen=True, slots=True)
class DailyUsage:
    day: int  # days since 1970-01-01, UTC
    usage: ModelUsage


class Usage:
    """The usage table of one database: a row per model call, summed per model."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, record: UsageRecord) -> int:
        validate_session_id(record.session_id)
        return await self._db.write_lean(lambda sql: insert_usage(sql, record))

    async def summary(
        self,
        *,
        since_ms: int | None = None,
        session_id: str | None = None,
        identities: Collection[str] | None = None,
    ) -> list[ModelUsage]:
        """Usage per model; with `identities`, only what was spent for them."""
        # Ten columns: past the four sqlmodel's select is typed for, so SQLAlchemy's own.
        stmt = sa_select(col(UsageRow.model), *_sums(col(UsageRow.elapsed_ms) > 0))
        stmt = stmt.group_by(col(UsageRow.model))
        if since_ms is not None:
            stmt = stmt.where(col(UsageRow.send_at) >= since_ms)
        if session_id is not None:
            stmt = stmt.where(col(UsageRow.session_id) == validate_session_id(session_id))
        if identities is not None:
            stmt = stmt.where(col(UsageRow.identity).in_(tuple(identities)))
        stmt = stmt.order_by(col(UsageRow.model))

        def work(session: Session) -> list[ModelUsage]:
            rows = session.connection().execute(stmt).all()
            return [_usage(model, sums) for model, *sums in rows]

        return await self._db.read(work)

    async def daily(
        self, *, since_ms: int, identities: Collection[str] | None = None
    ) -> list[DailyUsage]:
        """Usage per model per UTC day since `since_ms`, oldest day first; with
        `identities`, only what was spent for them."""
        day = (col(UsageRow.send_at) // DAY_MS).label("day")
        stmt = sa_select(day, col(UsageRow.model), *_sums(col(UsageRow.elapsed_ms) > 0))
        stmt = stmt.where(col(UsageRow.send_at) >= since_ms)
        if identities is not None:
            stmt = stmt.where(col(UsageRow.identity).in_(tuple(identities)))
        stmt = stmt.group_by(day, col(UsageRow.model)).order_by(day, col(UsageRow.model))

        def work(session: Session) -> list[DailyUsage]:
            rows = session.connection().execute(stmt).all()
            return [DailyUsage(int(d), _usage(model, sums)) for d, model, *sums in rows]

        return await self._db.read(work)

    async def tokens(
        self,
        *,
        since_ms: int,
        identities: Collection[str] | None = None,
        session_id: str | None = None,
    ) -> int:
        """Input and output tokens spent since `since_ms` (see `spent`)."""
        spent = await self.spent(since_ms=since_ms, identities=identities, session_id=session_id)
        return spent.tokens

    async def spent(
        self,
        *,
        since_ms: int,
        identities: Collection[str] | None = None,
        session_id: str | None = None,
    ) -> Spent:
        """Tokens (input and output) and dollars spent since `since_ms`, for any of
        `identities` and/or in `session_id` (what a budget is held against)."""
        stmt = sa_select(
            func.coalesce(func.sum(col(UsageRow.input) + col(UsageRow.output)), 0),
            func.coalesce(func.sum(col(UsageRow.cost)), 0.0),
        ).where(col(UsageRow.send_at) >= since_ms)
        if identities is not None:
            stmt = stmt.where(col(UsageRow.identity).in_(tuple(identities)))
        if session_id is not None:
            stmt = stmt.where(col(UsageRow.session_id) == validate_session_id(session_id))

        def work(session: Session) -> Spent:
            tokens, cost = session.connection().execute(stmt).one()
            return Spent(int(tokens or 0), float(cost or 0.0))

        return await self._db.read(work)

    async def by_identity(
        self,
        *,
        since_ms: int,
        identities: Collection[str] | None = None,
        session_id: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        biggest: int | None = None,
    ) -> list[IdentityUsage]:
        """Spend per identity since `since_ms` (of `identities`, in `session_id`), the
        biggest spender first (only the `biggest` ones); or, paged (`limit` of them after the
        identity `after`), by identity, an order that holds while spend grows between pages."""
        total = func.sum(col(UsageRow.input) + col(UsageRow.output))
        stmt = sa_select(
            col(UsageRow.identity),
            func.count(),
            func.sum(col(UsageRow.input)),
            func.sum(col(UsageRow.output)),
            func.sum(col(UsageRow.cost)),
        ).where(col(UsageRow.send_at) >= since_ms)
        if identities is not None:
            stmt = stmt.where(col(UsageRow.identity).in_(tuple(identities)))
        if session_id is not None:
            stmt = stmt.where(col(UsageRow.session_id) == validate_session_id(session_id))
        stmt = stmt.group_by(col(UsageRow.identity))
        if limit is None:
            stmt = stmt.order_by(total.desc(), col(UsageRow.identity)).limit(biggest)
        else:
            if after is not None:
                stmt = stmt.where(col(UsageRow.identity) > after)
            stmt = stmt.order_by(col(UsageRow.identity)).limit(limit)

        def work(session: Session) -> list[IdentityUsage]:
            rows = session.connection().execute(stmt).all()
            return [
                IdentityUsage(
                    str(who),
                    int(calls),
                    int(inp or 0),
                    int(out or 0),
                    None if cost is None else float(cost),
                )
                for who, calls, inp, out, cost in rows
            ]

        return await self._db.read(work)

    async def by_chat(
        self,
        *,
        since_ms: int,
        identities: Collection[str] | None = None,
        biggest: int | None = None,
    ) -> list[ChatUsage]:
        """Spend per shared chat (dc-*, tg-*) since `since_ms` (of `identities`), the biggest
        first (only the `biggest` ones)."""
        total = func.sum(col(UsageRow.input) + col(UsageRow.output))
        shared = or_(*(col(UsageRow.session_id).startswith(p) for p in SHARED_PREFIXES))
        stmt = sa_select(
            col(UsageRow.session_id),
            func.count(),
            func.sum(col(UsageRow.input)),
            func.sum(col(UsageRow.output)),
            func.sum(col(UsageRow.cost)),
        ).where(col(UsageRow.send_at) >= since_ms, shared)
        if identities is not None:
            stmt = stmt.where(col(UsageRow.identity).in_(tuple(identities)))
        stmt = stmt.group_by(col(UsageRow.session_id))
        stmt = stmt.order_by(total.desc(), col(UsageRow.session_id)).limit(biggest)

        def work(session: Session) -> list[ChatUsage]:
            rows = session.connection().execute(stmt).all()
            return [
                ChatUsage(
                    str(sid),
                    int(calls),
                    int(inp or 0),
                    int(out or 0),
                    None if cost is None else float(cost),
                )
                for sid, calls, inp, out, cost in rows
            ]

        return await self._db.read(work)

    async def purge(self, *, retention_days: int = 28, now: int | None = None) -> int:
        """Delete usage rows older than the retention window, but none of the current UTC
        month (a monthly budget counts them); returns how many went."""
        at = now if now is not None else now_ms()
        cutoff = min(at - retention_days * DAY_MS, month_start(at))

        def work(session: Session) -> int:
            result = session.exec(delete(UsageRow).where(col(UsageRow.send_at) < cutoff))
            return int(result.rowcount)

        return await self._db.write(work)
