"""The rows behind quotas: the `quota` table's overrides (an identity's or a chat's own limits,
over the settings' defaults) and the counts the limits are held against — sessions owned.
Token spend is the `usage` table's (gateway/store/usage.py); the rules are gateway/quotas.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Iterator, Mapping
from contextvars import ContextVar
from typing import Final

from sqlalchemy import func, or_, select
from sqlmodel import Session, col

from gateway.clock import now_ms
from gateway.store.config_changes import ConfigChangeRow, UnknownChange, record
from gateway.store.db import Database
from gateway.store.lean import Lean
from gateway.store.models import QuotaRow, SessionRow
from gateway.store.session_facts import LINKED, CallerRead

# Sessions that count as owned: the private ones that last. `temp-*` sessions are reaped after
# a while idle and are what a plain send makes, so they do not count.
OWNED_PREFIXES = ("cli-", "chat-")


def _limits(text: str) -> dict[str, int]:
    try:
        raw = json.loads(text or "{}")
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): int(v) for k, v in raw.items() if isinstance(v, int) and v >= 0}


# A person's identities, and the overrides of each that has any.
PersonQuotas = tuple[frozenset[str], dict[str, dict[str, int]]]

# What the request being handled read already of its caller's person (`read_ahead`): the access
# check that comes first reads it with the session's facts, and the message's admission then
# takes it from here instead of asking the archive again (a round trip on PostgreSQL).
_READ_AHEAD: Final[ContextVar[tuple[str, PersonQuotas] | None]] = ContextVar(
    "agenvoy_person_quotas", default=None
)


# And of the shared chat the message goes to: its own overrides (`Quotas.of_chat`).
_CHAT_AHEAD: Final[ContextVar[tuple[str, dict[str, int]] | None]] = ContextVar(
    "agenvoy_chat_quotas", default=None
)


@contextlib.contextmanager
def read_ahead(identity: str, read: CallerRead) -> Iterator[None]:
    """While in this block, `Quotas.of_person(identity)` answers with what `read` found, and
    `Quotas.of_chat` for its session when `read` has the chat's overrides."""
    quotas = {subject: _limits(text) for subject, text in read.quotas.items()}
    token = _READ_AHEAD.set((identity, (read.identities, quotas)))
    chat = None
    if read.facts is not None and read.chat_quotas is not None:
        chat = (read.facts.session_id, _limits(read.chat_quotas))
    chat_token = _CHAT_AHEAD.set(chat)
    try:
        yield
    finally:
        _CHAT_AHEAD.reset(chat_token)
        _READ_AHEAD.reset(token)


# Each identity of a person with its overrides (NULL when it has none), in one statement.
_WITH_OVERRIDES = " FROM linked LEFT JOIN quota ON quota.subject = linked.identity"
_PERSON_OVERRIDES = LINKED + "SELECT linked.identity, quota.limits" + _WITH_OVERRIDES
# The same (kind 0) and a chat's own overrides (kind 1; none when it has none). Parameters:
# identity, identity, chat.
_PERSON_AND_CHAT = (
    LINKED
    + "SELECT 0, linked.identity, quota.limits"
    + _WITH_OVERRIDES
    + " UNION ALL SELECT 1, subject, limits FROM quota WHERE subject = ?"
)


def _overrides(sql: Lean, subjects: Collection[str]) -> dict[str, dict[str, int]]:
    wanted = sorted(subjects)
    if not wanted:
        return {}
    marks = ", ".join("?" * len(wanted))
    rows = sql.all(f"SELECT subject, limits FROM quota WHERE subject IN ({marks})", *wanted)
    return {str(subject): _limits(text) for subject, text in rows}


class Quotas:
    """The repository of quota overrides."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def of(self, subjects: Collection[str]) -> dict[str, dict[str, int]]:
        """The overrides set for each of `subjects` that has any."""
        return await self._db.read_lean(lambda sql: _overrides(sql, subjects))

    async def of_person(self, identity: str) -> PersonQuotas:
        """The identities of `identity`'s person and their overrides, in one read: what every
        message asks before it is taken in (none when the request read them ahead)."""
        ahead = _READ_AHEAD.get()
        if ahead is not None and ahead[0] == identity:
            return ahead[1]

        def work(sql: Lean) -> PersonQuotas:
            rows = sql.all(_PERSON_OVERRIDES, identity, identity)
            found = {str(subject): _limits(text) for subject, text in rows if text is not None}
            return frozenset(str(subject) for subject, _ in rows), found

        return await self._db.read_lean(work)

    async def of_person_and_chat(
        self, identity: str, chat: str
    ) -> tuple[PersonQuotas, dict[str, int]]:
        """`of_person(identity)` and `of_chat(chat)`: what a message to a shared chat asks
        before it is taken in, in one read (each taken from the request's read ahead when it
        has it)."""
        person_ahead, chat_ahead = _READ_AHEAD.get(), _CHAT_AHEAD.get()
        has_person = person_ahead is not None and person_ahead[0] == identity
        has_chat = chat_ahead is not None and chat_ahead[0] == chat
        if has_person or has_chat:
            return await self.of_person(identity), await self.of_chat(chat)

        def work(sql: Lean) -> tuple[PersonQuotas, dict[str, int]]:
            rows = sql.all(_PERSON_AND_CHAT, identity, identity, chat)
            linked = [row[1:] for row in rows if row[0] == 0]
            found = {str(subject): _limits(text) for subject, text in linked if text is not None}
            own = [_limits(row[2]) for row in rows if row[0] == 1]
            person = frozenset(str(subject) for subject, _ in linked), found
            return person, own[0] if own else {}

        return await self._db.read_lean(work)

    async def of_chat(self, session_id: str) -> dict[str, int]:
        """The overrides set for a chat (none when it has none); read ahead with the caller's
        facts for a message to it (`read_ahead`)."""
        ahead = _CHAT_AHEAD.get()
        if ahead is not None and ahead[0] == session_id:
            return ahead[1]
        return (await self.of([session_id])).get(session_id, {})

    async def all(self) -> dict[str, dict[str, int]]:
        def work(session: Session) -> dict[str, dict[str, int]]:
            rows = session.connection().execute(
                select(col(QuotaRow.subject), col(QuotaRow.limits)).order_by(col(QuotaRow.subject))
            )
            return {str(subject): _limits(text) for subject, text in rows}

        return await self._db.read(work)

    async def set(
        self, subject: str, changes: Mapping[str, int | None], *, by: str = ""
    ) -> dict[str, int]:
        """Change `subject`'s overrides (None takes one away, back to the default); returns
        what it has now. A subject left with none loses its row. The change is logged
        (gateway/store/config_changes.py) in the same transaction."""

        def work(session: Session) -> dict[str, int]:
            row = session.get(QuotaRow, subject)
            limits = _limits(row.limits) if row is not None else {}
            for key, value in changes.items():
                if value is None:
                    limits.pop(key, None)
                else:
                    limits[key] = value
            return _replace(session, subject, row, limits, by=by)

        return await self._db.write(work)

    async def revert(self, change_id: int, *, by: str = "") -> tuple[str, dict[str, int]]:
        """Put back the overrides a logged quota change replaced (a new change, itself
        logged); the subject and what it has now."""

        def work(session: Session) -> tuple[str, dict[str, int]]:
            logged = session.get(ConfigChangeRow, change_id)
            if logged is None or logged.kind != "quota":
                raise UnknownChange(f"no quota change {change_id}")
            row = session.get(QuotaRow, logged.subject)
            limits = _limits(logged.before)
            return logged.subject, _replace(
                session, logged.subject, row, limits, by=by, reverts=change_id
            )

        return await self._db.write(work)

    async def sessions_owned(self, identities: Collection[str]) -> int:
        """How many `cli-`/`chat-` sessions `identities` own."""
        wanted = tuple(identities)
        if not wanted:
            return 0
        stmt = select(func.count()).where(
            col(SessionRow.owner).in_(wanted),
            or_(*(col(SessionRow.id).startswith(p) for p in OWNED_PREFIXES)),
        )
        return await self._db.read(lambda s: int(s.connection().execute(stmt).scalar_one()))


def _replace(
    session: Session,
    subject: str,
    row: QuotaRow | None,
    limits: dict[str, int],
    *,
    by: str,
    reverts: int | None = None,
) -> dict[str, int]:
    """Make `subject`'s overrides `limits` (no row when none) and log the change."""
    before = _limits(row.limits) if row is not None else {}
    at = now_ms()
    record(session, "quota", subject, before or None, limits or None, by=by, at=at, reverts=reverts)
    if not limits:
        if row is not None:
            session.delete(row)
        return {}
    if row is None:
        row = QuotaRow(subject=subject)
    row.limits, row.updated_by, row.updated_at = json.dumps(limits), by, at
    session.add(row)
    return limits
