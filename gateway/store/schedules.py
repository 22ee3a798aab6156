"""The `schedule` table: each session's scheduled prompts and when each is due next.

Moving a schedule on is a conditional update (`next_due_at` still the due time the caller
fired): two instances, or an instance and its own previous life, never both move one due time.
Suspending (its creator's credential is gone) only touches schedules not suspended yet, so
several instances seeing the same revocation leave the first one's time and reason.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import func, update
from sqlmodel import Session, col, delete, select

from gateway.store.db import Database
from gateway.store.models import ScheduleRow
from gateway.store.request_keys import RequestKey, forget_expired_in, keep_in

# Due schedules taken per round of the firing job; the rest come in the next round.
DUE_BATCH: Final = 100


@dataclass(frozen=True, slots=True)
class Schedule:
    id: int
    session_id: str
    spec: str
    prompt: str
    timezone: str
    misfire: str  # "once" | "skip"
    created_by_id: str
    created_by_name: str
    created_at: int
    next_due_at: int
    last_fired_at: int
    suspended_at: int = 0  # Unix ms; 0 while it fires
    suspended_reason: str = ""

    @property
    def suspended(self) -> bool:
        return self.suspended_at != 0

    @property
    def skip_missed(self) -> bool:
        return self.misfire == "skip"

    def source_key(self, due_ms: int) -> str:
        """The message key of this schedule's firing at `due_ms`: one message per due time.
        The creation time tells apart a schedule whose id a database hands out again."""
        return f"schedule:{self.id}:{self.created_at}:{due_ms}"


def _of(row: ScheduleRow) -> Schedule:
    assert row.id is not None
    return Schedule(
        row.id,
        row.session_id,
        row.spec,
        row.prompt,
        row.timezone,
        row.misfire,
        row.created_by_id,
        row.created_by_name,
        row.created_at,
        row.next_due_at,
        row.last_fired_at,
        row.suspended_at,
        row.suspended_reason,
    )


class ScheduleTable:
    """The schedule table of one database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, row: ScheduleRow, request: RequestKey | None = None) -> Schedule:
        """Store a new schedule; with `request`, its key too, in the same transaction."""

        def work(session: Session) -> Schedule:
            if request is not None:
                forget_expired_in(session, request)
            session.add(row)
            session.flush()
            made = _of(row)
            if request is not None:
                keep_in(session, request, made.session_id, schedule_id=made.id)
            return made

        return await self._db.write(work)

    async def of_session(
        self, session_id: str, *, after_id: int = 0, limit: int | None = None
    ) -> list[Schedule]:
        """The session's schedules, oldest first: all, or `limit` after the one `after_id`."""
        stmt = select(ScheduleRow).where(
            col(ScheduleRow.session_id) == session_id, col(ScheduleRow.id) > after_id
        )
        stmt = stmt.order_by(col(ScheduleRow.id))
        if limit is not None:
            stmt = stmt.limit(limit)
        return await self._db.read(lambda session: [_of(r) for r in session.exec(stmt).all()])

    async def remove(self, session_id: str, schedule_id: int) -> bool:
        stmt = delete(ScheduleRow).where(
            col(ScheduleRow.id) == schedule_id, col(ScheduleRow.session_id) == session_id
        )
        return await self._db.write(
            lambda session: bool(session.connection().execute(stmt).rowcount)
        )

    async def due(self, now_ms: int, limit: int = DUE_BATCH) -> list[Schedule]:
        """Schedules due at `now_ms`, the longest overdue first; suspended ones never are."""
        stmt = (
            select(ScheduleRow)
            .where(col(ScheduleRow.next_due_at) <= now_ms, col(ScheduleRow.suspended_at) == 0)
            .order_by(col(ScheduleRow.next_due_at), col(ScheduleRow.id))
            .limit(limit)
        )
        return await self._db.read(lambda session: [_of(r) for r in session.exec(stmt).all()])

    async def advance(
        self, schedule_id: int, from_due: int, to_due: int, *, fired_at: int | None
    ) -> bool:
        """Move the schedule from due time `from_due` to `to_due` (and note when it fired, if
        it did); False when someone moved it (or removed it) first."""
        values: dict[str, int] = {"next_due_at": to_due}
        if fired_at is not None:
            values["last_fired_at"] = fired_at
        stmt = (
            update(ScheduleRow)
            .where(col(ScheduleRow.id) == schedule_id, col(ScheduleRow.next_due_at) == from_due)
            .values(**values)
        )
        return await self._db.write(
            lambda session: bool(session.connection().execute(stmt).rowcount)
        )

    async def counts(self) -> dict[str, int]:
        """How many schedules each session has (sessions without any left out)."""
        stmt = select(ScheduleRow.session_id, func.count()).group_by(col(ScheduleRow.session_id))
        return await self._db.read(
            lambda session: {str(s): int(n) for s, n in session.exec(stmt).all()}
        )

    async def get(self, schedule_id: int) -> Schedule | None:
        return await self._db.read(lambda session: _maybe(session.get(ScheduleRow, schedule_id)))

    async def count_by(self, creators: Collection[str]) -> int:
        """How many schedules these identities made (suspended ones included: they still
        count against their creator until removed)."""
        if not creators:
            return 0
        stmt = select(func.count()).where(col(ScheduleRow.created_by_id).in_(creators))
        return await self._db.read(lambda session: int(session.exec(stmt).one()))

    async def suspend_by(self, creators: Collection[str], at_ms: int, reason: str) -> list[int]:
        """Suspend every schedule of these identities not suspended yet; the ids suspended."""
        if not creators:
            return []
        active = (
            col(ScheduleRow.created_by_id).in_(creators),
            col(ScheduleRow.suspended_at) == 0,
        )
        return await self._suspend(active, at_ms, reason)

    async def suspend_http_except(
        self, valid: Collection[str], at_ms: int, reason: str
    ) -> list[int]:
        """Suspend the schedules made over HTTP by an identity not in `valid` (a token no
        longer issued); the ids suspended."""
        orphaned = (
            col(ScheduleRow.created_by_id).startswith("http:"),
            col(ScheduleRow.created_by_id).not_in(list(valid)),
            col(ScheduleRow.suspended_at) == 0,
        )
        return await self._suspend(orphaned, at_ms, reason)

    async def _suspend(self, where: tuple[Any, ...], at_ms: int, reason: str) -> list[int]:
        def work(session: Session) -> list[int]:
            found = session.exec(select(col(ScheduleRow.id)).where(*where)).all()
            ids = [int(i) for i in found if i is not None]
            if not ids:
                return []
            # The condition again: a row another instance suspended meanwhile keeps its reason.
            stmt = (
                update(ScheduleRow)
                .where(col(ScheduleRow.id).in_(ids), *where)
                .values(suspended_at=at_ms, suspended_reason=reason[:200])
            )
            session.connection().execute(stmt)
            return ids

        return await self._db.write(work)

    async def resume(
        self, schedule_id: int, next_due_at: int, *, creator: tuple[str, str] | None = None
    ) -> bool:
        """Let a suspended schedule fire again from `next_due_at`; with `creator` (key,
        name), it acts for that identity from now on. False when it is not suspended."""
        values: dict[str, object] = {
            "suspended_at": 0,
            "suspended_reason": "",
            "next_due_at": next_due_at,
        }
        if creator is not None:
            values["created_by_id"], values["created_by_name"] = creator
        stmt = (
            update(ScheduleRow)
            .where(col(ScheduleRow.id) == schedule_id, col(ScheduleRow.suspended_at) != 0)
            .values(**values)
        )
        return await self._db.write(
            lambda session: bool(session.connection().execute(stmt).rowcount)
        )

    async def suspended(self) -> list[Schedule]:
        stmt = select(ScheduleRow).where(col(ScheduleRow.suspended_at) != 0)
        stmt = stmt.order_by(col(ScheduleRow.id))
        return await self._db.read(lambda session: [_of(r) for r in session.exec(stmt).all()])

    async def all(self) -> list[Schedule]:
        stmt = select(ScheduleRow).order_by(col(ScheduleRow.id))
        return await self._db.read(lambda session: [_of(r) for r in session.exec(stmt).all()])


def _maybe(row: ScheduleRow | None) -> Schedule | None:
    return None if row is None else _of(row)
