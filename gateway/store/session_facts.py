"""What every request on a session asks before anything else (`gateway/access.py`): the
caller's identities (their person's, across links) and what the ownership rule needs of the
session, as plain SQL on the driver's cursor (gateway/store/lean.py), where the ORM's reads
cost several times the statements themselves."""

from __future__ import annotations

from collections.abc import Collection

from gateway.ownership import SessionFacts, ShareMode, is_shared
from gateway.store.lean import Lean

_PERSON_SQL = "SELECT person FROM identity_link WHERE identity = ?"
_MEMBERS_SQL = "SELECT identity FROM identity_link WHERE person = ?"
_OWNER_SQL = "SELECT owner FROM session WHERE id = ?"
_SHARES_SQL = "SELECT identity, mode FROM session_share WHERE session_id = ?"


def linked_lean(sql: Lean, identity: str) -> frozenset[str]:
    """Every identity of the person `identity` belongs to, itself included."""
    person = sql.value(_PERSON_SQL, identity) or identity
    members = sql.all(_MEMBERS_SQL, person)
    return frozenset({person, identity, *(str(row[0]) for row in members)})


def facts_lean(sql: Lean, session_id: str, identities: Collection[str]) -> SessionFacts | None:
    """What the rule needs of `session_id` for a caller with `identities`; None when there
    is no such session."""
    row = sql.one(_OWNER_SQL, session_id)
    if row is None:
        return None
    wanted = sorted(identities)
    if is_shared(session_id):  # the rule asks a shared chat's membership, never its shares
        marks = ", ".join("?" * len(wanted))
        member = (
            bool(wanted)
            and sql.one(
                f"SELECT 1 FROM messages WHERE session_id = ? AND sender_key IN ({marks}) LIMIT 1",
                session_id,
                *wanted,
            )
            is not None
        )
        return SessionFacts(session_id, owner=str(row[0] or ""), member=member)
    shares = {
        str(identity): ShareMode(mode)
        for identity, mode in sql.all(_SHARES_SQL, session_id)
        if identity in identities
    }
    return SessionFacts(session_id, owner=str(row[0] or ""), shares=shares)
