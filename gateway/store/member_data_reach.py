"""Where one member's text reaches beyond the rows they wrote and the replies to their tasks:
the sessions of the subagents their tasks started, the quotes of what they wrote in other
rows of the sessions they wrote in, and the names of the sessions they own.

- A subagent session (`temp-*`, its `parent` option naming one of their tasks) ran for them,
  on text their task handed it: every message, run and journal of it is theirs.
- A quote is their message's whole text found inside another row of a session in scope (the
  agent's answer to someone else quoting a search hit, a tool result, a journal, a delivery
  not yet sent): the text is replaced by `ERASED` where it stands, the rest of the row stays.
  Texts shorter than `MIN_QUOTE_CHARS` are not looked for (a "yes" would blank every "yes"
  in the session); their own rows are erased whatever their length.
- The names of the sessions they own are what they typed: blanked.

A copy of their words someone else typed into a session the member never wrote in is that
person's message, and stays.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from typing import Any, Final

from sqlalchemy import delete, func, or_, select, update
from sqlmodel import Session, col

from gateway.store.models import (
    ActionHistoryRow,
    EmbeddingRow,
    FileHistoryRow,
    MessageRow,
    OutboxRow,
    SessionRow,
    SessionSummaryRow,
    TaskJournalRow,
)

ERASED: Final = "[erased]"
MIN_QUOTE_CHARS: Final = 12

# The text columns of the rows that belong to a session, where a quote may stand.
_QUOTED: Final[tuple[tuple[Any, tuple[str, ...]], ...]] = (
    (ActionHistoryRow, ("objective", "reply", "tool_results")),
    (OutboxRow, ("payload", "last_error")),
    (TaskJournalRow, ("text", "steps", "prompt")),
    (FileHistoryRow, ("content",)),
    (SessionSummaryRow, ("summary",)),
)


def needles(texts: Iterable[str]) -> list[str]:
    """The forms a quote of `texts` takes: as written, and inside JSON (escaped, and with
    non-ASCII characters as `\\u` escapes), longest first so a longer one goes first."""
    found: set[str] = set()
    for text in texts:
        if len(text) < MIN_QUOTE_CHARS or text == ERASED:
            continue
        found.add(text)
        found.add(json.dumps(text, ensure_ascii=False)[1:-1])
        found.add(json.dumps(text)[1:-1])
    return sorted(found, key=lambda n: (-len(n), n))


def unquote(value: str, forms: Collection[str]) -> str:
    """`value` with every quote in `forms` replaced by ERASED."""
    for form in forms:
        if form in value:
            value = value.replace(form, ERASED)
    return value


def subagent_sessions(session: Session, tasks: Collection[str]) -> dict[str, set[str]]:
    """`{session: tasks run in it}` of every subagent session one of `tasks` started (nested
    ones too: a child's parent task is its root task)."""
    if not tasks:
        return {}
    conn = session.connection()
    rows = conn.execute(
        select(col(SessionRow.id), col(SessionRow.settings)).where(
            col(SessionRow.id).startswith("temp-"), col(SessionRow.settings).contains('"parent"')
        )
    ).all()
    found: dict[str, set[str]] = {}
    for sid, settings in rows:
        try:
            parent = json.loads(settings).get("parent") or {}
        except (ValueError, AttributeError):
            continue
        if isinstance(parent, dict) and parent.get("task") in tasks:
            found[str(sid)] = set()
    for sid, runs in found.items():
        for hashes in (
            select(col(MessageRow.task_hash)).where(col(MessageRow.session_id) == sid),
            select(col(ActionHistoryRow.task_hash)).where(col(ActionHistoryRow.session_id) == sid),
        ):
            runs.update(str(h) for (h,) in conn.execute(hashes).all() if h)
    return found


def session_messages(session: Session, sid: str) -> list[tuple[int, str]]:
    """(id, content) of every message of `sid`."""
    stmt = select(col(MessageRow.id), col(MessageRow.content)).where(
        col(MessageRow.session_id) == sid
    )
    return [(_int(i), str(c)) for i, c in session.connection().execute(stmt).all()]


def erase_quotes(
    session: Session, sid: str, forms: Collection[str], skip: Collection[int]
) -> set[int]:
    """Replace the quotes in `forms` in the rows of `sid` (messages other than `skip`, which
    are erased whole); the ids of the messages changed. Their embeddings go, and the summary
    embeddings that hold a quote."""
    if not forms:
        return set()
    conn = session.connection()
    quoted = or_(*(col(MessageRow.content).contains(form, autoescape=True) for form in forms))
    stmt = select(col(MessageRow.id), col(MessageRow.content)).where(
        col(MessageRow.session_id) == sid, quoted
    )
    changed: set[int] = set()
    for message_id, content in conn.execute(stmt).all():
        if _int(message_id) in skip:
            continue
        conn.execute(
            update(MessageRow)
            .where(col(MessageRow.id) == message_id)
            .values(content=unquote(str(content), forms))
        )
        changed.add(_int(message_id))
    for table, columns in _QUOTED:
        for name in columns:
            column = getattr(table, name)
            for form in forms:
                conn.execute(
                    update(table)
                    .where(
                        col(table.session_id) == sid,
                        col(column).contains(form, autoescape=True),
                    )
                    .values({name: func.replace(column, form, ERASED)})
                )
    gone = [col(EmbeddingRow.text).contains(form, autoescape=True) for form in forms]
    if changed:
        gone.append(
            (col(EmbeddingRow.kind) == "message") & col(EmbeddingRow.message_id).in_(changed)
        )
    conn.execute(delete(EmbeddingRow).where(col(EmbeddingRow.session_id) == sid, or_(*gone)))
    return changed


def blank_session_names(
    session: Session, identities: Collection[str], forms: Collection[str]
) -> int:
    """Blank the names of the sessions `identities` own, and the quotes in any other name."""
    conn = session.connection()
    named = conn.execute(
        update(SessionRow)
        .where(col(SessionRow.owner).in_(list(identities)), col(SessionRow.name) != "")
        .values(name="")
    ).rowcount
    for form in forms:
        named += conn.execute(
            update(SessionRow)
            .where(col(SessionRow.name).contains(form, autoescape=True))
            .values(name=func.replace(col(SessionRow.name), form, ERASED))
        ).rowcount
    return int(named)


def owned_sessions(session: Session, identities: Collection[str]) -> set[str]:
    stmt = select(col(SessionRow.id)).where(col(SessionRow.owner).in_(list(identities)))
    return {str(sid) for (sid,) in session.connection().execute(stmt).all()}


def _int(value: Any) -> int:
    return int(value)
