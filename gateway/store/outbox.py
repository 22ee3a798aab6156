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

from sqlalchemy import or_, update
from sqlmodel import Session, col, select

from gateway.clock import now_ms
from gateway.store.db import Database, insert_ignoring
from gateway.store.models import OutboxRow

MAX_ERROR_CHARS = 2000


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


def insert_entry_statement(dialect: str, entry: OutboxEntry) -> Any:
    return insert_ignoring(dialect, OutboxRow).values(
        session_id=entry.session_id,
        task_hash=entry.task_hash,
        chunk_index=entry.chunk_index,
        content_hash=entry.content_hash,
        kind=entry.kind,
        platform=entry.platform,
        payload=json.dumps(entry.payload, ensure_ascii=False),
        created_at=now_ms(),
    )


def _key(entry: OutboxEntry) -> Any:
    return (
        select(OutboxRow)
        .where(col(OutboxRow.task_hash) == entry.task_hash)
        .where(col(OutboxRow.chunk_index) == entry.chunk_index)
        .where(col(OutboxRow.content_hash) == entry.content_hash)
    )


def claim_in(session: Session, dialect: str, entry: OutboxEntry) -> OutboxItem:
    """Record `entry` unless it is there already; returns the row either way."""
    session.connection().execute(insert_entry_statement(dialect, entry))
    row = session.exec(_key(entry)).one()
    return outbox_item(row)


async def claim(db: Database, entry: OutboxEntry) -> OutboxItem:
    return await db.write(lambda session: claim_in(session, db.dialect, entry))


async def take(db: Database, item_id: int, claimant: str, claim_ms: int) -> OutboxItem | None:
    """Claim a pending entry for `claimant` to send, for `claim_ms`: the entry as it stands,
    or None while another instance's claim holds (or the entry is no longer pending). With
    several instances, only the claim's holder sends an entry."""
    now = now_ms()
    stmt = (
        update(OutboxRow)
        .where(
            col(OutboxRow.id) == item_id,
            col(OutboxRow.status) == "pending",
            or_(
                col(OutboxRow.claimed_by) == "",
                col(OutboxRow.claimed_by) == claimant,
                col(OutboxRow.claimed_until) < now,
            ),
        )
        .values(claimed_by=claimant, claimed_until=now + claim_ms)
    )

    def work(session: Session) -> OutboxItem | None:
        if session.connection().execute(stmt).rowcount != 1:
            return None
        return outbox_item(
            session.exec(select(OutboxRow).where(col(OutboxRow.id) == item_id)).one()
        )

    return await db.write(work)


async def mark_delivered(db: Database, item_id: int, platform_message_id: str) -> None:
    stmt = (
        update(OutboxRow)
        .where(col(OutboxRow.id) == item_id)
        .values(
            status="delivered",
            platform_message_id=platform_message_id,
            delivered_at=now_ms(),
            attempts=OutboxRow.attempts + 1,
        )
    )
    await db.write(lambda session: session.connection().execute(stmt))


async def record_parts(db: Database, item_id: int, parts_sent: int, parts_attempted: int) -> None:
    """The platform accepted `parts_sent` parts of the entry's message so far, and was handed
    `parts_attempted`."""
    stmt = (
        update(OutboxRow)
        .where(col(OutboxRow.id) == item_id)
        .values(parts_sent=parts_sent, parts_attempted=parts_attempted)
    )
    await db.write(lambda session: session.connection().execute(stmt))


async def mark_attempt_failed(db: Database, item_id: int, error: str, *, final: bool) -> None:
    stmt = (
        update(OutboxRow)
        .where(col(OutboxRow.id) == item_id)
        .values(
            status="failed" if final else "pending",
            last_error=error[:MAX_ERROR_CHARS],
            attempts=OutboxRow.attempts + 1,
        )
    )
    await db.write(lambda session: session.connection().execute(stmt))


async def undelivered(db: Database, platforms: set[str] | None = None) -> list[OutboxItem]:
    stmt = select(OutboxRow).where(col(OutboxRow.status) == "pending").order_by(col(OutboxRow.id))
    if platforms is not None:
        stmt = stmt.where(col(OutboxRow.platform).in_(sorted(platforms)))

    def work(session: Session) -> list[OutboxItem]:
        return [outbox_item(row) for row in session.exec(stmt).all()]

    return await db.read(work)


def outbox_item(row: OutboxRow) -> OutboxItem:
    assert row.id is not None
    return OutboxItem(
        id=row.id,
        session_id=row.session_id,
        task_hash=row.task_hash,
        chunk_index=row.chunk_index,
        kind=row.kind,
        platform=row.platform,
        payload=json.loads(row.payload),
        status=row.status,
        attempts=row.attempts,
        platform_message_id=row.platform_message_id,
        parts_sent=row.parts_sent,
        parts_attempted=row.parts_attempted,
    )
