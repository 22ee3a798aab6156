"""The rows behind who owns what: linked identities, session owners and shares, and which
sessions one person may see (the rules themselves are `gateway/ownership.py`).

A person is the set of identities linked together; `identity_link` maps each linked identity
to the one it was joined to (`person`). An identity with no row is a person of its own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, delete, false, or_, select
from sqlmodel import Session, col

from gateway.clock import now_ms
from gateway.ownership import SHARED_PREFIXES, ShareMode
from gateway.store.config_changes import ConfigChangeRow, UnknownChange, record
from gateway.store.db import Database, insert_ignoring
from gateway.store.models import (
    IdentityLinkRow,
    LinkAttemptRow,
    LinkCodeRow,
    MessageRow,
    SessionRow,
    SessionShareRow,
)
from gateway.store.session_facts import CallerRead, caller_facts_lean, linked_lean


@dataclass(frozen=True, slots=True)
class Visibility:
    """Which sessions a listing or a search may show: all of them (a gateway admin), or those
    `identities` own, were shared with, or wrote in as members of a shared chat."""

    everything: bool
    identities: frozenset[str] = frozenset()

    def condition(self, session_id: Any) -> ColumnElement[bool]:
        """A SQL condition on a column of session ids."""
        if self.everything:
            return ~false()
        if not self.identities:
            return false()
        mine = select(col(SessionRow.id)).where(col(SessionRow.owner).in_(self.identities))
        shared = select(col(SessionShareRow.session_id)).where(
            col(SessionShareRow.identity).in_(self.identities)
        )
        chats = or_(*(col(MessageRow.session_id).startswith(f"{p}-") for p in SHARED_PREFIXES))
        wrote = select(col(MessageRow.session_id)).where(
            col(MessageRow.sender_key).in_(self.identities), chats
        )
        return or_(session_id.in_(mine), session_id.in_(shared), session_id.in_(wrote))

    def sql(self, session_id: str, params: dict[str, object]) -> str:
        """`condition` as SQL text on the column `session_id`, its values added to `params`
        (for the statements written as text, the full-text search)."""
        if self.everything:
            return "1 = 1"
        if not self.identities:
            return "1 = 0"
        names = []
        for i, identity in enumerate(sorted(self.identities)):
            params[f"who{i}"] = identity
            names.append(f":who{i}")
        who = ", ".join(names)
        chats = " OR ".join(f"w.session_id LIKE '{p}-%'" for p in sorted(SHARED_PREFIXES))
        return (
            f"({session_id} IN (SELECT id FROM session WHERE owner IN ({who}))"
            f" OR {session_id} IN (SELECT session_id FROM session_share WHERE identity IN ({who}))"
            f" OR {session_id} IN (SELECT w.session_id FROM messages w"
            f" WHERE w.sender_key IN ({who}) AND ({chats})))"
        )


EVERYTHING = Visibility(everything=True)


def _run(session: Session, stmt: Any) -> Any:
    return session.connection().execute(stmt)


def linked_in(session: Session, identity: str) -> frozenset[str]:
    """Every identity of the person `identity` belongs to, inside a read or write."""
    return _linked(session, identity)


def _linked(session: Session, identity: str) -> frozenset[str]:
    row = session.get(IdentityLinkRow, identity)
    person = row.person if row is not None else identity
    members = _run(
        session, select(col(IdentityLinkRow.identity)).where(col(IdentityLinkRow.person) == person)
    ).all()
    return frozenset({person, identity, *(str(m[0]) for m in members)})


class Ownership:
    """The repository of links, owners and shares."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def linked(self, identity: str) -> frozenset[str]:
        """Every identity of the person `identity` belongs to, itself included."""
        return await self._db.read_lean(lambda sql: linked_lean(sql, identity))

    async def caller_facts(self, identity: str, session_id: str) -> CallerRead:
        """`linked(identity)` (with their quota overrides) and `facts(session_id, …)` for
        those identities, in one read: what every request on a session asks first."""

        return await self._db.read_lean(lambda sql: caller_facts_lean(sql, identity, session_id))

    async def link(self, identity: str, to: str, *, by: str = "") -> frozenset[str]:
        """Join `identity` (and whatever it was linked with) to the person of `to`; returns the
        person's identities."""

        def work(session: Session) -> frozenset[str]:
            at = now_ms()
            before = _linked(session, identity)
            after = _join(session, identity, to, by=by, at=at)
            _log_link(session, identity, before, after, by=by, at=at)
            return after

        return await self._db.write(work)

    async def unlink(self, identity: str, *, by: str = "") -> bool:
        """Take `identity` out of its person; False when it was linked with nobody."""

        def work(session: Session) -> bool:
            before = _linked(session, identity)
            if _unlink(session, identity):
                _log_link(session, identity, before, frozenset({identity}), by=by, at=now_ms())
                return True
            return False

        return await self._db.write(work)

    async def revert_link(self, change_id: int, *, by: str) -> frozenset[str]:
        """Roll back logged link change `change_id`: the identity it named goes back to the
        person it was part of before (or alone); the identities it has now."""

        def work(session: Session) -> frozenset[str]:
            change = session.get(ConfigChangeRow, change_id)
            if change is None or change.kind != "link":
                raise UnknownChange(f"no link change {change_id}")
            identity = change.subject
            before_change = json.loads(change.before) if change.before else {}
            was = [i for i in before_change.get("linked", []) if i != identity]
            before = _linked(session, identity)
            _unlink(session, identity)
            if was:  # join it to the person it was part of: to one of them still there
                _join(session, identity, was[0], by=by, at=now_ms())
            after = _linked(session, identity)
            _log_link(session, identity, before, after, by=by, at=now_ms(), reverts=change_id)
            return after

        return await self._db.write(work)

    async def set_owner(self, session_id: str, identity: str) -> bool:
        """Make `identity` the owner of a private session (one made before owners were kept,
        or handed on); False when there is no such session."""

        def work(session: Session) -> bool:
            row = session.get(SessionRow, session_id)
            if row is None:
                return False
            row.owner = identity
            session.add(row)
            return True

        return await self._db.write(work)

    async def share(self, session_id: str, identity: str, mode: ShareMode) -> None:
        def work(session: Session) -> None:
            row = session.get(SessionShareRow, (session_id, identity))
            if row is None:
                row = SessionShareRow(session_id=session_id, identity=identity, mode=mode)
            row.mode, row.shared_at = mode.value, now_ms()
            session.add(row)

        await self._db.write(work)

    async def unshare(self, session_id: str, identity: str) -> bool:
        def work(session: Session) -> bool:
            stmt = delete(SessionShareRow).where(
                col(SessionShareRow.session_id) == session_id,
                col(SessionShareRow.identity) == identity,
            )
            return bool(session.connection().execute(stmt).rowcount)

        return await self._db.write(work)

    async def shares(self, session_id: str) -> dict[str, ShareMode]:
        def work(session: Session) -> dict[str, ShareMode]:
            rows = _run(
                session,
                select(col(SessionShareRow.identity), col(SessionShareRow.mode)).where(
                    col(SessionShareRow.session_id) == session_id
                ),
            ).all()
            return {str(i): ShareMode(m) for i, m in rows}

        return await self._db.read(work)

    # -- one-time link codes ---------------------------------------------------------------

    async def issue_code(
        self, identity: str, code: str, *, expires_at: int, now: int, keep: int
    ) -> None:
        """Keep `code` (hashed) for `identity` until `expires_at`. Expired codes go; of the
        identity's live ones only the newest `keep` stay, this one included."""
        digest = code_hash(code)

        def work(session: Session) -> None:
            session.connection().execute(
                delete(LinkCodeRow).where(col(LinkCodeRow.expires_at) <= now)
            )
            live = _run(
                session,
                select(col(LinkCodeRow.code_hash))
                .where(col(LinkCodeRow.identity) == identity)
                .order_by(col(LinkCodeRow.expires_at).desc()),
            ).all()
            stale = [str(r[0]) for r in live[max(keep - 1, 0) :]]
            if stale:
                session.connection().execute(
                    delete(LinkCodeRow).where(col(LinkCodeRow.code_hash).in_(stale))
                )
            session.add(LinkCodeRow(code_hash=digest, identity=identity, expires_at=expires_at))

        await self._db.write(work)

    async def redeem_code(self, code: str, *, now: int) -> str | None:
        """The identity that asked for `code`, the code used up; None for a code that is
        unknown, used or expired."""
        return await self._db.write(lambda session: _redeem(session, code, now))

    async def enter_code(
        self, identity: str, code: str | None, *, now: int, attempts: int, window_ms: int
    ) -> CodeEntry:
        """`identity` enters `code` (None: one that cannot be a code, a wrong one): redeemed
        unless it entered `attempts` wrong ones in the last `window_ms`, a wrong one counted.
        The count is one row per identity, locked for the transaction: instances sharing the
        archive count the same guesses, and guesses sent at once are counted one after the
        other."""

        def work(session: Session) -> CodeEntry:
            conn = session.connection()
            gate = insert_ignoring(self._db.dialect, LinkAttemptRow)
            conn.execute(gate.values(identity=identity))
            kept = conn.execute(
                select(col(LinkAttemptRow.misses))
                .where(col(LinkAttemptRow.identity) == identity)
                .with_for_update()
            ).scalar_one()
            misses = [int(at) for at in str(kept).split(",") if at and int(at) > now - window_ms]
            if len(misses) >= attempts:
                return CodeEntry(None, misses[0] + window_ms - now)
            issuer = _redeem(session, code, now) if code else None
            if issuer is None:
                misses.append(now)
            if misses:
                row = session.get(LinkAttemptRow, identity)
                assert row is not None
                row.misses = ",".join(str(at) for at in misses)
                session.add(row)
            else:
                conn.execute(delete(LinkAttemptRow).where(col(LinkAttemptRow.identity) == identity))
            return CodeEntry(issuer)

        return await self._db.write(work)

    async def drop_codes(self, identity: str) -> int:
        """Forget every code `identity` asked for; how many there were."""

        def work(session: Session) -> int:
            stmt = delete(LinkCodeRow).where(col(LinkCodeRow.identity) == identity)
            return int(session.connection().execute(stmt).rowcount or 0)

        return await self._db.write(work)


@dataclass(frozen=True, slots=True)
class CodeEntry:
    """What entering a link code came to."""

    issuer: str | None  # who asked for the code; None when it was wrong (or not tried)
    retry_after_ms: int = 0  # above 0: not tried, too many wrong codes lately


def _redeem(session: Session, code: str, now: int) -> str | None:
    row = session.get(LinkCodeRow, code_hash(code))
    if row is None:
        return None
    session.delete(row)  # used once, whether it was still good or not
    return row.identity if row.expires_at > now else None


def code_hash(code: str) -> str:
    """How a link code is kept: whoever reads the archive cannot enter the codes it holds."""
    return hashlib.sha256(code.encode()).hexdigest()


def _join(session: Session, identity: str, to: str, *, by: str, at: int) -> frozenset[str]:
    """`Ownership.link` inside a write: the person's identities after."""
    target = session.get(IdentityLinkRow, to)
    person = target.person if target is not None else to
    for each in _linked(session, identity) | {to}:
        if each == person:
            continue
        row = session.get(IdentityLinkRow, each)
        if row is None:
            session.add(IdentityLinkRow(identity=each, person=person, linked_by=by, linked_at=at))
        else:
            row.person, row.linked_by, row.linked_at = person, by, at
            session.add(row)
    session.flush()
    return _linked(session, person)


def _unlink(session: Session, identity: str) -> bool:
    """`Ownership.unlink` inside a write."""
    row = session.get(IdentityLinkRow, identity)
    if row is not None:
        session.delete(row)
        session.flush()
        return True
    # The identity others were joined to: the next one becomes their person.
    rows = list(
        session.scalars(
            select(IdentityLinkRow).where(col(IdentityLinkRow.person) == identity)
        ).all()
    )
    if not rows:
        return False
    heir = rows[0].identity
    for each in rows:
        if each.identity == heir:
            session.delete(each)
        else:
            each.person = heir
            session.add(each)
    session.flush()
    return True


def _log_link(
    session: Session,
    identity: str,
    before: frozenset[str],
    after: frozenset[str],
    *,
    by: str,
    at: int,
    reverts: int | None = None,
) -> None:
    # A person's identities, sorted: `None` for one linked with nobody.
    def shown(group: frozenset[str]) -> dict[str, list[str]] | None:
        return {"linked": sorted(group)} if len(group) > 1 else None

    record(session, "link", identity, shown(before), shown(after), by=by, at=at, reverts=reverts)
