"""Requests a client may send again (`Idempotency-Key`): a key, scoped to whoever sent it,
names for 24 hours what its first request made and what that request asked for. A repeat is
answered with what was made; the same key with another request is told apart; a key older than
that is free again.

A message's key is also its `source_key`: the archive's unique index makes a repeat store
nothing, in the very transaction that would have stored it (gateway/store/messages.py), and the
key's row commits with the message, so neither is ever found without the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from hashlib import sha256
from typing import Final

from sqlalchemy import delete, update
from sqlmodel import Session, col

from gateway.store.base import StoreBase
from gateway.store.db import insert_ignoring
from gateway.store.lean import Lean
from gateway.store.models import MessageRow, RequestKeyRow

KEEP_MS: Final = 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class RequestKey:
    """One request under a key: `key` (also its message's source key), the `fingerprint` of
    what it asks for, and when it came (ms, on the runtime's clock)."""

    key: str
    fingerprint: str
    at: int

    @classmethod
    def of(cls, caller: str, given: str, asked: object, at: int) -> RequestKey:
        """`caller`'s key `given` for a request asking `asked` (JSON-able): two callers with
        the same key never meet, and a key of any length fits the archive's column."""
        scoped = sha256(f"{caller}\n{given}".encode()).hexdigest()
        canonical = json.dumps(asked, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return cls(f"request:{scoped}", sha256(canonical.encode()).hexdigest(), at)

    @property
    def fresh_since(self) -> int:
        """Rows made before this are expired."""
        return self.at - KEEP_MS


@dataclass(frozen=True, slots=True)
class KeptRequest:
    """What a key's first request asked for and made."""

    fingerprint: str
    session_id: str
    task_hash: str
    schedule_id: int


class RequestKeyTaken(RuntimeError):
    """Another request with the same key was stored first (the two came at once); raised in
    the transaction, so nothing of the later one is kept."""


# Lean (gateway.store.lean): in the transaction of the message a key makes.
_FORGET = "DELETE FROM request_key WHERE key = ? AND created_at < ?"
_UNKEY_MESSAGE = "UPDATE messages SET source_key = '' WHERE source_key = ?"
_KEEP = (
    "INSERT INTO request_key (key, fingerprint, session_id, task_hash, schedule_id, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_FIND = (
    "SELECT fingerprint, session_id, task_hash, schedule_id FROM request_key"
    " WHERE key = ? AND created_at >= ?"
)


def forget_expired(sql: Lean, request: RequestKey) -> None:
    """Free the key if its row is past its 24 hours, with the source key of the message it
    made: the new request stores its own."""
    if sql.run(_FORGET, request.key, request.fresh_since) > 0:
        sql.run(_UNKEY_MESSAGE, request.key)


def keep(
    sql: Lean, request: RequestKey, session_id: str, *, task_hash: str = "", schedule_id: int = 0
) -> None:
    found = sql.run(
        _KEEP, request.key, request.fingerprint, session_id, task_hash, schedule_id, request.at
    )
    if found != 1:
        raise RequestKeyTaken(request.key)


def forget_expired_in(session: Session, request: RequestKey) -> None:
    """`forget_expired` in an ORM transaction."""
    conn = session.connection()
    gone = conn.execute(
        delete(RequestKeyRow).where(
            col(RequestKeyRow.key) == request.key,
            col(RequestKeyRow.created_at) < request.fresh_since,
        )
    )
    if gone.rowcount:
        unkey = update(MessageRow).where(col(MessageRow.source_key) == request.key)
        conn.execute(unkey.values(source_key=""))


def keep_in(session: Session, request: RequestKey, session_id: str, *, schedule_id: int) -> None:
    """`keep` in an ORM transaction."""
    dialect = session.get_bind().dialect.name
    row = insert_ignoring(dialect, RequestKeyRow).values(
        key=request.key,
        fingerprint=request.fingerprint,
        session_id=session_id,
        task_hash="",
        schedule_id=schedule_id,
        created_at=request.at,
    )
    if session.connection().execute(row).rowcount != 1:
        raise RequestKeyTaken(request.key)


class RequestKeys(StoreBase):
    async def kept_request(self, request: RequestKey) -> KeptRequest | None:
        """What `request`'s key made within its 24 hours; None when it is free."""

        def work(sql: Lean) -> KeptRequest | None:
            row = sql.one(_FIND, request.key, request.fresh_since)
            if row is None:
                return None
            return KeptRequest(str(row[0]), str(row[1]), str(row[2]), int(row[3]))

        return await self.db.read_lean(work)
