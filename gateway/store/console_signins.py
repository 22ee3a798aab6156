"""The web console's sign-ins, kept in the database so that every instance behind one address
knows them: a sign-in made on one is honoured, and ended, on all.

A sign-in is known by a random id the browser holds in its cookie; the table keeps only its
SHA-256, so a copy of the database signs nobody in. Times are the caller's clock (Unix ms).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import delete
from sqlmodel import Session, col

from gateway.store.db import Database
from gateway.store.models import ConsoleSigninRow


@dataclass(frozen=True, slots=True)
class SignIn:
    identity: str  # the identity key, `platform:sender id`
    name: str  # its display name
    credential: str  # the SHA-256 of the credential it was made with
    expires_at: int


def _hash(signin_id: str) -> str:
    return hashlib.sha256(signin_id.encode()).hexdigest()


class ConsoleSignins:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def start(
        self, identity: str, name: str, credential: str, *, now: int, lasts_ms: int
    ) -> str:
        """A new sign-in; returns its id (what the cookie carries). Sign-ins past their
        expiry are cleared on the way, so the table holds only live ones and a few."""
        signin_id = secrets.token_urlsafe(32)
        row = ConsoleSigninRow(
            id_hash=_hash(signin_id),
            identity=identity,
            name=name,
            credential=credential,
            created_at=now,
            expires_at=now + lasts_ms,
        )

        def work(session: Session) -> None:
            expired = delete(ConsoleSigninRow).where(col(ConsoleSigninRow.expires_at) <= now)
            session.connection().execute(expired)
            session.add(row)

        await self._db.write(work)
        return signin_id

    async def find(self, signin_id: str, *, now: int) -> SignIn | None:
        """The sign-in `signin_id` names, unless it ended or expired."""
        key = _hash(signin_id)

        def work(session: Session) -> SignIn | None:
            row = session.get(ConsoleSigninRow, key)
            if row is None or row.expires_at <= now:
                return None
            return SignIn(row.identity, row.name, row.credential, row.expires_at)

        return await self._db.read(work)

    async def end(self, signin_id: str) -> bool:
        key = _hash(signin_id)

        def work(session: Session) -> bool:
            stmt = delete(ConsoleSigninRow).where(col(ConsoleSigninRow.id_hash) == key)
            return bool(session.connection().execute(stmt).rowcount)

        return await self._db.write(work)

    async def end_made_with(self, credential: str) -> int:
        """End every sign-in made with a credential the gateway no longer accepts."""

        def work(session: Session) -> int:
            stmt = delete(ConsoleSigninRow).where(col(ConsoleSigninRow.credential) == credential)
            return int(session.connection().execute(stmt).rowcount)

        return await self._db.write(work)
