"""What every request on a session asks before anything else (`gateway/access.py`): the
caller's identities (their person's, across links) and what the ownership rule needs of the
session, as plain SQL on the driver's cursor (gateway/store/lean.py), where the ORM's reads
cost several times the statements themselves."""

from __future__ import annotations

from dataclasses import dataclass

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
# What a request on a session asks, in one statement: the caller's identities (kind 0, each
# with its quota overrides, NULL when it has none: the message's admission asks them next), and
# the session's row (kind 1; none when there is no such session) with, for a private session,
# each share one of those identities holds (NULLs when none), or, for a shared chat, whether
# one of them has written there. Parameters: identity, identity, session.
_CALLER = (
    "SELECT 0, linked.identity, quota.limits, NULL FROM linked"
    " LEFT JOIN quota ON quota.subject = linked.identity"
)
_CALLER_AND_SHARES = (
    LINKED + _CALLER + " UNION ALL"
    " SELECT 1, s.owner, share.identity, share.mode FROM session AS s"
    " LEFT JOIN session_share AS share ON share.session_id = s.id"
    " AND share.identity IN (SELECT identity FROM linked) WHERE s.id = ?"
)
# For a shared chat, also its own quota overrides (kind 2; none when it has none), which the
# message's admission asks next. Parameters: identity, identity, session, session.
_CALLER_AND_MEMBERSHIP = (
    LINKED + _CALLER + " UNION ALL"
    " SELECT 1, s.owner, (SELECT 'member' FROM messages WHERE session_id = s.id"
    " AND sender_key IN (SELECT identity FROM linked) LIMIT 1), NULL"
    " FROM session AS s WHERE s.id = ?"
    " UNION ALL SELECT 2, subject, limits, NULL FROM quota WHERE subject = ?"
)


def linked_lean(sql: Lean, identity: str) -> frozenset[str]:
    """Every identity of the person `identity` belongs to, itself included."""
    return frozenset(str(row[0]) for row in sql.all(_LINKED_SQL, identity, identity))


@dataclass(frozen=True, slots=True)
class CallerRead:
    """What one read of `caller_facts_lean` found."""

    identities: frozenset[str]  # the caller's person's, across links
    quotas: dict[str, str]  # each of them that has quota overrides: the overrides as stored
    facts: SessionFacts | None  # what the ownership rule needs; None: no such session
    # A shared chat's own quota overrides as stored ("" when it has none); None: not read
    # (a private session, whose admission does not ask them).
    chat_quotas: str | None = None


def caller_facts_lean(sql: Lean, identity: str, session_id: str) -> CallerRead:
    """`linked_lean(identity)` with their quota overrides, and what the rule needs of
    `session_id` for a caller with those identities."""
    shared = is_shared(session_id)  # the rule asks a shared chat's membership, never its shares
    if shared:
        rows = sql.all(_CALLER_AND_MEMBERSHIP, identity, identity, session_id, session_id)
    else:
        rows = sql.all(_CALLER_AND_SHARES, identity, identity, session_id)
    callers = [row[1:3] for row in rows if row[0] == 0]
    identities = frozenset(str(who) for who, _ in callers)
    quotas = {str(who): str(limits) for who, limits in callers if limits is not None}
    chat = [str(row[2] or "") for row in rows if row[0] == 2] if shared else None
    chat_quotas = None if chat is None else (chat[0] if chat else "")
    session = [row[1:] for row in rows if row[0] == 1]
    if not session:
        return CallerRead(identities, quotas, None, chat_quotas)
    owner = str(session[0][0] or "")
    if shared:
        facts = SessionFacts(session_id, owner=owner, member=session[0][1] is not None)
    else:
        shares = {str(who): ShareMode(mode) for _, who, mode in session if who is not None}
        facts = SessionFacts(session_id, owner=owner, shares=shares)
    return CallerRead(identities, quotas, facts, chat_quotas)
