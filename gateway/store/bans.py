"""The `ban` rows: members kept out of one chat (`scope` its session id) or of the whole
gateway (`scope` "*"), and what the gateway needs to check them on every message (the rule
itself is `gateway/bans.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlmodel import Session, col

from gateway.store.db import Database
from gateway.store.models import BanRow, IdentityLinkRow

EVERYWHERE = "*"


@dataclass(frozen=True, slots=True)
class Ban:
    scope: str  # a chat's session id, or "*" for the whole gateway
    identity: str  # the identity key the ban was given for
    banned_by: str
    reason: str
    created_at: int  # ms


@dataclass(frozen=True, slots=True)
class BanSnapshot:
    """Every ban, with each banned identity's linked identities: enough to check a message
    without asking the database."""

    bans: tuple[Ban, ...]
    # identity key → every identity of the person it belongs to (itself included)
    people: dict[str, frozenset[str]]

    def matching(self, scopes: tuple[str, ...], identity: str) -> Ban | None:
        """The ban that keeps `identity` (or a linked identity) out of one of `scopes`."""
        for ban in self.bans:
            if ban.scope in scopes and identity in self.people.get(ban.identity, ()):
                return ban
        return None


def _ban(row: BanRow) -> Ban:
    return Ban(row.scope, row.identity, row.banned_by, row.reason, row.created_at)


class BanList:
    """The repository of bans."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, scope: str, identity: str, *, by: str, reason: str, at: int) -> bool:
        """Ban `identity` in `scope`; False when it was banned there already (the first ban,
        with its reason, stands)."""

        def work(session: Session) -> bool:
            if session.get(BanRow, (scope, identity)) is not None:
                return False
            session.add(
                BanRow(scope=scope, identity=identity, banned_by=by, reason=reason, created_at=at)
            )
            return True

        return await self._db.write(work)

    async def remove(self, scope: str, identity: str) -> bool:
        """Lift the ban; False when there was none."""

        def work(session: Session) -> bool:
            stmt = delete(BanRow).where(
                col(BanRow.scope) == scope, col(BanRow.identity) == identity
            )
            return bool(session.connection().execute(stmt).rowcount)

        return await self._db.write(work)

    async def listed(self, scope: str | None = None) -> list[Ban]:
        """The bans of `scope` (every ban with None), oldest first."""

        def work(session: Session) -> list[Ban]:
            stmt = select(BanRow).order_by(col(BanRow.created_at), col(BanRow.identity))
            if scope is not None:
                stmt = stmt.where(col(BanRow.scope) == scope)
            return [_ban(row) for row in session.scalars(stmt).all()]

        return await self._db.read(work)

    async def snapshot(self) -> BanSnapshot:
        """Every ban and the linked identities of everyone banned, in one read."""

        def work(session: Session) -> BanSnapshot:
            bans = tuple(
                _ban(row) for row in session.scalars(select(BanRow).order_by(col(BanRow.scope)))
            )
            if not bans:
                return BanSnapshot((), {})
            banned = {ban.identity for ban in bans}
            own = session.scalars(
                select(IdentityLinkRow).where(col(IdentityLinkRow.identity).in_(banned))
            ).all()
            person_of = {identity: identity for identity in banned}
            person_of.update({row.identity: row.person for row in own})
            persons = set(person_of.values())
            members: dict[str, set[str]] = {person: {person} for person in persons}
            for row in session.scalars(
                select(IdentityLinkRow).where(col(IdentityLinkRow.person).in_(persons))
            ).all():
                members[row.person].add(row.identity)
            people = {
                identity: frozenset(members[person] | {identity})
                for identity, person in person_of.items()
            }
            return BanSnapshot(bans, people)

        return await self._db.read(work)
