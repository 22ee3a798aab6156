"""What every request on a session asks before anything else (`gateway/access.py`): the
caller's identities (their person's, across links) and what the ownership rule needs of the
session, as plain SQL on the driver's cursor (gateway/store/lean.py), where the ORM's reads
cost several times the statements themselves."""

from __future__ import annotations

from collections.abc import Collection

from gateway.ownership import SessionFacts, ShareMode, is_shared
from gateway.store.lean import Lean

# The identities of the person an identity (the two parameters) belongs to, as the WITH
# `linked (identity)`: the person's own key (the identity itself when it is linked with
# nobody) and every identity linked to it, itself among them. One statement where the person
# and its links were two, on every message: on PostgreSQL each is a round trip.
LINKED = (
    "WITH person AS (SELECT COALESCE("
    "(SELECT person FROM identity_link WHERE identity = ?), ?) AS id),"
    " linked (identity) AS (SELECT id FROM person UNION"
    " SELECT identity FROM identity_link WHERE person = (SELECT id FROM person)) "
)
_LINKED_SQL = LINKED + "SELECT identity FROM linked"
# The session's owner with each of its shares (NULLs when it has none), in one statement.
_OWNER_AND_SHARES_SQL = (
    "SELECT s.owner, share.identity, share.mode FROM session AS s"
    " LEFT JOIN session_share AS share ON share.session_id = s.id WHERE s.id = ?"
)


def linked_lean(sql: Lean, identity: str) -> frozenset[str]:
    """Every identity of the person `identity` belongs to, itself included."""
    return frozenset(str(row[0]) for row in sql.all(_LINKED_SQL, identity, identity))


def facts_lean(sql: Lean, session_id: str, identities: Collection[str]) -> SessionFacts | None:
    """What the rule needs of `session_id` for a caller with `identities`; None when there
    is no such session."""
    wanted = sorted(identities)
    if is_shared(session_id):  # the rule asks a shared chat's membership, never its shares
        if not wanted:
            row = sql.one("SELECT owner, NULL FROM session WHERE id = ?", session_id)
        else:
            marks = ", ".join("?" * len(wanted))
            row = sql.one(
                "SELECT owner, (SELECT 1 FROM messages WHERE session_id = ?"
                f" AND sender_key IN ({marks}) LIMIT 1) FROM session WHERE id = ?",
                session_id,
                *wanted,
                session_id,
            )
        if row is None:
            return None
        return SessionFacts(session_id, owner=str(row[0] or ""), member=row[1] is not None)
    rows = sql.all(_OWNER_AND_SHARES_SQL, session_id)
    if not rows:
        return None
    shares = {
        str(identity): ShareMode(mode)
        for _, identity, mode in rows
        if identity is not None and identity in identities
    }
    return SessionFacts(session_id, owner=str(rows[0][0] or ""), shares=shares)
