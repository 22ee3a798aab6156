"""The outbox table: what must reach a user, recorded before it is sent.

A row is keyed by (task, chunk index, content hash): generating the same chunk again (a task
replayed after a restart) finds the row already there, delivered or not, and never sends it
twice; a prompt asked anew after a restart carries a new expiry, hence a new hash, and is sent.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, select

from gateway.clock import now_ms
from gateway.store.db import Database
from gateway.store.lean import Lean, Row
from gateway.store.models import OutboxRow

MAX_ERROR_CHARS = 2000

Parts = tuple[int, int]  # parts sent, parts attempted


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    session_id: str
    task_hash: str
    chunk_index: int
    kind: str
    platform: str
    payload: dict[str, Any]

    @property
    def content_hash(self) -> str:
        body = json.dumps(self.payload.get("event", self.payload), sort_keys=True)
        return hashlib.sha256(f"{self.chunk_index}\x00{body}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class OutboxItem:
    id: int
    session_id: str
    task_hash: str
    chunk_index: int
    kind: str
    platform: str
    payload: dict[str, Any]
    status: str
    attempts: int
    platform_message_id: str
    parts_sent: int = 0
    parts_attempted: int = 0
    next_attempt_at: int = 0  # ms; 0: due now
    expires_at: int = 0  # ms; 0: not failed yet


@dataclass(frozen=True, slots=True)
class Undelivered:
    """An entry that failed for good, or is being tried again: what the console shows."""

    task_hash: str
    kind: str
    platform: str
    status: str  # failed | pending
    attempts: int
    last_error: str
    next_attempt_at: int


@dataclass(frozen=True, slots=True)
class Backlog:
    """A platform's pending entries in the whole archive (every instance's): how many, how
    many of them failed at least once (in backoff), and when the oldest was recorded."""

    platform: str
    pending: int
    retrying: int
    oldest_at: int  # Unix ms


# Served by ix_outbox_status (status, platform): only the pending rows are visited.
_BACKLOG = (
    "SELECT platform, COUNT(*), SUM(CASE WHEN attempts > 0 THEN 1 ELSE 0 END), MIN(created_at)"
    " FROM outbox WHERE status = 'pending' GROUP BY platform"
)


# Every reply to a platform takes these (recorded with its run, claimed, its parts counted,
# marked delivered), so they are plain SQL on the driver's cursor (gateway.store.lean); every
# column is given, as the ORM's Python-side defaults do not apply here.
_COLUMNS = (
    "id, session_id, task_hash, chunk_index, kind, platform, payload, status, attempts,"
    " platform_message_id, parts_sent, parts_attempted, next_attempt_at, expires_at"
)
_COLUMN_NAMES = tuple(name.strip() for name in _COLUMNS.split(","))
_INSERT = (
    "INSERT INTO outbox (session_id, task_hash, chunk_index, content_hash, kind, platform,"
    " payload, status, platform_message_id, attempts, parts_sent, parts_attempted,"
    " last_error, created_at, delivered_at, claimed_by, claimed_until, next_attempt_at,"
    " expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', '', 0, 0, 0, '', ?, 0, '', 0, 0, 0)"
    " ON CONFLICT DO NOTHING"
)
_BY_KEY = (
    f"SELECT {_COLUMNS} FROM outbox WHERE task_hash = ? AND chunk_index = ? AND content_hash = ?"
)
_BY_ID = f"SELECT {_COLUMNS} FROM outbox WHERE id = ?"
_TAKE = (
    "UPDATE outbox SET claimed_by = ?, claimed_until = ? WHERE id = ? AND status = 'pending'"
    " AND (claimed_by = '' OR claimed_by = ? OR claimed_until < ?)"
)
_DELIVERED = (
    "UPDATE outbox SET status = 'delivered', platform_message_id = ?, delivered_at = ?,"
    " attempts = attempts + 1 WHERE id = ?"
)
_PARTS = "UPDATE outbox SET parts_sent = ?, parts_attempted = ? WHERE id = ?"
_FAILED = (
    "UPDATE outbox SET status = ?, last_error = ?, attempts = attempts + 1,"
    " next_attempt_at = ?, expires_at = ? WHERE id = ?"
)


def claim_in(sql: Lean, entry: OutboxEntry) -> OutboxItem:
    """Record `entry` unless it is there already; returns the row either way."""
    content_hash = entry.content_hash
    payload = json.dumps(entry.payload, ensure_ascii=False)
    sql.run(
        _INSERT,
        entry.session_id,
        entry.task_hash,
        entry.chunk_index,
        content_hash,
        entry.kind,
        entry.platform,
        payload,
        now_ms(),
    )
    row = sql.one(_BY_KEY, entry.task_hash, entry.chunk_index, content_hash)
    assert row is not None, "an outbox entry just recorded is there"
    return _item(row)


def _item(row: Row) -> OutboxItem:
    """An entry from its `_COLUMNS`, in their order."""
    fields = dict(zip(_COLUMN_NAMES, row, strict=True))
    fields["payload"] = json.loads(fields["payload"])
    return OutboxItem(**fields)


def outbox_item(row: OutboxRow) -> OutboxItem:
    assert row.id is not None
    return _item(tuple(getattr(row, name) for name in _COLUMN_NAMES))


class Outbox:
    """The outbox table of one database: its entries claimed, sent and marked."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def claim(self, entry: OutboxEntry) -> OutboxItem:
        return await self._db.write_lean(lambda sql: claim_in(sql, entry))

    async def take(self, item_id: int, claimant: str, claim_ms: int) -> OutboxItem | None:
        """Claim a pending entry for `claimant` to send, for `claim_ms`: the entry as it
        stands, or None while another instance's claim holds (or the entry is no longer
        pending). With several instances, only the claim's holder sends an entry."""
        now = now_ms()

        def work(sql: Lean) -> OutboxItem | None:
            if sql.run(_TAKE, claimant, now + claim_ms, item_id, claimant, now) != 1:
                return None
            row = sql.one(_BY_ID, item_id)
            return _item(row) if row is not None else None

        return await self._db.write_lean(work)

    async def mark_delivered(
        self, item_id: int, platform_message_id: str, *, parts: Parts | None = None
    ) -> None:
        """`parts`: (sent, attempted) not recorded yet, stored with the mark."""
        at = now_ms()

        def work(sql: Lean) -> None:
            if parts is not None:
                sql.run(_PARTS, *parts, item_id)
            sql.run(_DELIVERED, platform_message_id, at, item_id)

        await self._db.write_lean(work)

    async def record_parts(self, item_id: int, parts_sent: int, parts_attempted: int) -> None:
        """The platform accepted `parts_sent` parts of the entry's message so far, and was
        handed `parts_attempted`."""
        await self._db.write_lean(lambda sql: sql.run(_PARTS, parts_sent, parts_attempted, item_id))

    async def mark_attempt_failed(
        self,
        item_id: int,
        error: str,
        *,
        final: bool,
        parts: Parts | None = None,
        next_attempt_at: int = 0,
        expires_at: int = 0,
    ) -> None:
        """One more failed attempt: the entry ends as failed (`final`), or stays pending with
        its next attempt due at `next_attempt_at` and none after `expires_at`."""
        status = "failed" if final else "pending"

        def work(sql: Lean) -> None:
            if parts is not None:
                sql.run(_PARTS, *parts, item_id)
            sql.run(_FAILED, status, error[:MAX_ERROR_CHARS], next_attempt_at, expires_at, item_id)

        await self._db.write_lean(work)

    async def get(self, item_id: int) -> OutboxItem | None:
        def work(sql: Lean) -> OutboxItem | None:
            row = sql.one(_BY_ID, item_id)
            return _item(row) if row is not None else None

        return await self._db.read_lean(work)

    async def backlog(self) -> list[Backlog]:
        """Pending entries per platform, over the whole archive (/metrics)."""

        def work(sql: Lean) -> list[Backlog]:
            return [
                Backlog(str(platform), int(count), int(retrying or 0), int(oldest or 0))
                for platform, count, retrying, oldest in sql.all(_BACKLOG)
            ]

        return await self._db.read_lean(work)

    async def troubled(self, session_id: str, limit: int = 10) -> list[Undelivered]:
        """The session's latest entries that failed, or wait to be tried again, newest first."""
        stmt = (
            select(OutboxRow)
            .where(col(OutboxRow.session_id) == session_id)
            .where(
                (col(OutboxRow.status) == "failed")
                | ((col(OutboxRow.status) == "pending") & (col(OutboxRow.attempts) > 0))
            )
            .order_by(col(OutboxRow.id).desc())
            .limit(limit)
        )

        def work(session: Session) -> list[Undelivered]:
            return [
                Undelivered(
                    row.task_hash,
                    row.kind,
                    row.platform,
                    row.status,
                    row.attempts,
                    row.last_error,
                    row.next_attempt_at,
                )
                for row in session.exec(stmt).all()
            ]

        return await self._db.read(work)

    async def earlier_deliveries(self, item: OutboxItem) -> tuple[str, ...]:
        """The platform's message ids of the entries delivered before `item` for the same
        chunk of its task, oldest first: a prompt asked again after a restart is a new entry
        (its expiry, hence its content, changed) for the chunk of its first asking."""
        stmt = (
            select(OutboxRow.platform_message_id)
            .where(
                col(OutboxRow.task_hash) == item.task_hash,
                col(OutboxRow.chunk_index) == item.chunk_index,
                col(OutboxRow.id) < item.id,
                col(OutboxRow.kind) == item.kind,
                col(OutboxRow.platform) == item.platform,
                col(OutboxRow.status) == "delivered",
                col(OutboxRow.platform_message_id) != "",
            )
            .order_by(col(OutboxRow.id))
        )

        def work(session: Session) -> tuple[str, ...]:
            return tuple(session.exec(stmt).all())

        return await self._db.read(work)

    async def undelivered(
        self, platforms: set[str] | None = None, *, due_by: int | None = None
    ) -> list[OutboxItem]:
        """Pending entries, oldest first; with `due_by` (ms), those whose next attempt is due
        by then."""
        stmt = select(OutboxRow).where(col(OutboxRow.status) == "pending")
        if due_by is not None:
            stmt = stmt.where(col(OutboxRow.next_attempt_at) <= due_by)
        stmt = stmt.order_by(col(OutboxRow.id))
        if platforms is not None:
            stmt = stmt.where(col(OutboxRow.platform).in_(sorted(platforms)))

        def work(session: Session) -> list[OutboxItem]:
            return [outbox_item(row) for row in session.exec(stmt).all()]

        return await self._db.read(work)
