"""The rows one member left in the archive: read together for an export, and redacted for an
erasure (gateway/member_data.py holds the rest: files, running tasks, the audit line).

A member is a person: every identity linked with theirs. What they wrote is found by
`messages.sender_key`; what the agent answered them, by the task hash their messages started.
Erased messages keep their row and place (ids, order, the summary's cursor stay meaningful)
with `ERASED` as their text and no sender name; runs, journals, prompt answers, deliveries and
embeddings of their tasks are emptied or dropped.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sqlalchemy import delete, or_, select, text, update
from sqlmodel import Session, col

from gateway.store.db import Database
from gateway.store.member_data_reach import ERASED as ERASED  # where the text stood
from gateway.store.member_data_reach import (
    blank_session_names,
    erase_quotes,
    needles,
    owned_sessions,
    session_messages,
    subagent_sessions,
)
from gateway.store.member_memories import erase_memories, export_memories
from gateway.store.models import (
    ActionHistoryRow,
    BanRow,
    EmbeddingCursorRow,
    EmbeddingRow,
    FileHistoryRow,
    IdentityLinkRow,
    MessageRow,
    OutboxRow,
    PromptAnswerRow,
    QuotaRow,
    ScheduleRow,
    SessionRow,
    SessionShareRow,
    SessionSummaryRow,
    TaskJournalRow,
    UsageRow,
)
from gateway.store.sqlite_setup import SQLITE_BUSY_TIMEOUT_MS

# Rows per IN (...) list: under the bound-parameter limit of older SQLite.
_CHUNK: Final = 500


@dataclass(slots=True)
class SessionTrace:
    """What one member left in one session."""

    message_ids: set[int] = field(default_factory=set)  # theirs and the replies to them
    texts: set[str] = field(default_factory=set)  # what they wrote, to find in action.log
    tasks: set[str] = field(default_factory=set)  # the tasks their messages started


@dataclass(frozen=True, slots=True)
class Footprint:
    sessions: dict[str, SessionTrace]  # where they wrote, and their subagents' sessions
    own: int  # messages they wrote
    replies: int  # the agent's messages in their tasks
    # The forms their words take when quoted elsewhere (member_data_reach.needles).
    quotes: tuple[str, ...] = ()
    owned: frozenset[str] = frozenset()  # the sessions they own

    @property
    def tasks(self) -> set[str]:
        return {t for trace in self.sessions.values() for t in trace.tasks}


@dataclass(frozen=True, slots=True)
class SessionErasure:
    messages: int
    runs: int
    journals: int
    deliveries: int
    embeddings: int
    summary_dropped: bool
    reset_at: int  # where the dropped summary starts again (its last /reset)


def _chunks(values: Collection[Any]) -> list[list[Any]]:
    items = sorted(values)
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


def _rows(session: Session, stmt: Any) -> list[dict[str, Any]]:
    return [dict(row._mapping) for row in session.connection().execute(stmt).all()]


def _footprint(session: Session, identities: Collection[str]) -> Footprint:
    conn = session.connection()
    traces: dict[str, SessionTrace] = defaultdict(SessionTrace)
    own = replies = 0
    mine = select(
        col(MessageRow.id),
        col(MessageRow.session_id),
        col(MessageRow.content),
        col(MessageRow.task_hash),
    ).where(col(MessageRow.sender_key).in_(list(identities)))
    for message_id, sid, content, task in conn.execute(mine).all():
        trace = traces[sid]
        trace.message_ids.add(_int(message_id))
        if content != ERASED:
            trace.texts.add(content)
        if task:
            trace.tasks.add(task)
        own += 1
    for sid, trace in list(traces.items()):
        for chunk in _chunks(trace.tasks):
            answers = select(col(MessageRow.id)).where(
                col(MessageRow.session_id) == sid,
                col(MessageRow.task_hash).in_(chunk),
            )
            found = {_int(row[0]) for row in conn.execute(answers).all()} - trace.message_ids
            replies += len(found)
            trace.message_ids |= found
    written = {text for trace in traces.values() for text in trace.texts}
    for sid, tasks in subagent_sessions(
        session, {t for tr in traces.values() for t in tr.tasks}
    ).items():
        child = traces[sid]  # ran for them, on what their task handed it: all of it theirs
        child.tasks |= tasks
        for message_id, content in session_messages(session, sid):
            child.message_ids.add(message_id)
            if content != ERASED:
                child.texts.add(content)
        written |= child.texts
    owned = frozenset(owned_sessions(session, identities))
    return Footprint(dict(traces), own, replies, tuple(needles(written)), owned)


def _int(value: Any) -> int:
    return int(value)


def _in(column: Any, values: Collection[Any]) -> Any:
    return or_(*(column.in_(chunk) for chunk in _chunks(values)))


def _erase_session(
    session: Session, sid: str, trace: SessionTrace, quotes: Collection[str]
) -> SessionErasure:
    conn = session.connection()
    secure = conn.dialect.name == "sqlite"
    if secure:
        # What an UPDATE or DELETE frees is overwritten with zeros, not left in the file.
        conn.exec_driver_sql("PRAGMA secure_delete=ON")
    try:
        ids, tasks = trace.message_ids, trace.tasks
        messages = conn.execute(
            update(MessageRow)
            .where(col(MessageRow.session_id) == sid, _in(col(MessageRow.id), ids))
            .values(content=ERASED, sender="")
        ).rowcount
        quoted = erase_quotes(session, sid, quotes, ids)
        messages += len(quoted)
        runs = journals = deliveries = 0
        if tasks:
            runs = conn.execute(
                update(ActionHistoryRow)
                .where(
                    col(ActionHistoryRow.session_id) == sid,
                    _in(col(ActionHistoryRow.task_hash), tasks),
                )
                .values(objective=ERASED, reply=ERASED, tool_results="[]")
            ).rowcount
            conn.execute(
                update(FileHistoryRow)
                .where(
                    col(FileHistoryRow.session_id) == sid,
                    _in(col(FileHistoryRow.task_id), tasks),
                )
                .values(content="")
            )
            journals = conn.execute(
                delete(TaskJournalRow).where(_in(col(TaskJournalRow.task_hash), tasks))
            ).rowcount
            conn.execute(delete(PromptAnswerRow).where(_in(col(PromptAnswerRow.task_hash), tasks)))
            deliveries = conn.execute(
                delete(OutboxRow).where(
                    col(OutboxRow.session_id) == sid, _in(col(OutboxRow.task_hash), tasks)
                )
            ).rowcount
        embeddings = conn.execute(
            delete(EmbeddingRow).where(
                col(EmbeddingRow.session_id) == sid,
                col(EmbeddingRow.kind) == "message",
                _in(col(EmbeddingRow.message_id), ids),
            )
        ).rowcount
        changed = ids | quoted
        dropped, reset_at = _drop_summary(session, sid, min(changed) if changed else 0)
        if dropped:
            embeddings += conn.execute(
                delete(EmbeddingRow).where(
                    col(EmbeddingRow.session_id) == sid, col(EmbeddingRow.kind) == "summary"
                )
            ).rowcount
        if embeddings or dropped:
            # A new epoch: every in-process index built from the older rows starts over.
            conn.execute(
                update(EmbeddingCursorRow)
                .where(col(EmbeddingCursorRow.session_id) == sid)
                .values(
                    epoch=uuid.uuid4().hex[:16],
                    **({"summary_cursor": 0} if dropped else {}),
                )
            )
    finally:
        if secure:
            conn.exec_driver_sql("PRAGMA secure_delete=OFF")
    return SessionErasure(messages, runs, journals, deliveries, embeddings, dropped, reset_at)


def _drop_summary(session: Session, sid: str, first_erased: int) -> tuple[bool, int]:
    """Drop the session's summary when it covers an erased message: the next fold builds it
    again from what is left. Its last /reset is kept, so nothing before that is folded in."""
    latest = session.scalars(
        select(SessionSummaryRow)
        .where(col(SessionSummaryRow.session_id) == sid)
        .order_by(col(SessionSummaryRow.id).desc())
        .limit(1)
    ).first()
    if latest is None or not latest.summary or not first_erased or latest.cursor < first_erased:
        return False, 0
    reset_at = latest.reset_at
    conn = session.connection()
    conn.execute(delete(SessionSummaryRow).where(col(SessionSummaryRow.session_id) == sid))
    session.add(
        SessionSummaryRow(
            session_id=sid, summary="", cursor=reset_at, reset_at=reset_at, updated_at=0
        )
    )
    session.flush()
    return True, reset_at


def _export(session: Session, identities: list[str], footprint: Footprint) -> dict[str, Any]:
    message_cols = (
        col(MessageRow.id),
        col(MessageRow.session_id),
        col(MessageRow.role),
        col(MessageRow.content),
        col(MessageRow.sender),
        col(MessageRow.sender_key),
        col(MessageRow.send_at),
        col(MessageRow.task_hash),
    )
    written = select(*message_cols).where(col(MessageRow.sender_key).in_(identities))
    reply_ids = {i for trace in footprint.sessions.values() for i in trace.message_ids if i}
    replies: list[dict[str, Any]] = []
    for chunk in _chunks(reply_ids):
        stmt = select(*message_cols).where(
            col(MessageRow.id).in_(chunk), col(MessageRow.sender_key).not_in(identities)
        )
        replies += _rows(session, stmt)
    return {
        "messages": _rows(session, written.order_by(col(MessageRow.id))),
        "replies": sorted(replies, key=lambda r: int(r["id"])),
        "usage": _rows(
            session,
            select(UsageRow)
            .where(col(UsageRow.identity).in_(identities))
            .order_by(col(UsageRow.id)),
        ),
        "schedules": _rows(
            session,
            select(ScheduleRow).where(col(ScheduleRow.created_by_id).in_(identities)),
        ),
        "sessions_owned": _rows(
            session,
            select(
                col(SessionRow.id),
                col(SessionRow.name),
                col(SessionRow.created_at),
                col(SessionRow.updated_at),
            ).where(col(SessionRow.owner).in_(identities)),
        ),
        "shared_with_them": _rows(
            session, select(SessionShareRow).where(col(SessionShareRow.identity).in_(identities))
        ),
        "links": _rows(
            session,
            select(IdentityLinkRow).where(
                or_(
                    col(IdentityLinkRow.identity).in_(identities),
                    col(IdentityLinkRow.person).in_(identities),
                )
            ),
        ),
        "bans": _rows(session, select(BanRow).where(col(BanRow.identity).in_(identities))),
        "quotas": _rows(session, select(QuotaRow).where(col(QuotaRow.subject).in_(identities))),
        "memories": export_memories(session, identities),
    }


class MemberRows:
    """The archive's side of one member's data."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def footprint(self, identities: Collection[str]) -> Footprint:
        wanted = list(identities)
        return await self._db.read(lambda s: _footprint(s, wanted))

    async def export(self, identities: Collection[str]) -> dict[str, Any]:
        """Every row about them, as JSON-ready values."""
        wanted = sorted(identities)

        def work(session: Session) -> dict[str, Any]:
            found = _export(session, wanted, _footprint(session, wanted))
            # Schedules, usage and the like hold only plain values; a round trip proves it.
            encoded: dict[str, Any] = json.loads(json.dumps(found, default=str))
            return encoded

        return await self._db.read(work)

    async def open_tasks(self, identities: Collection[str]) -> list[tuple[str, str]]:
        """(session, task) of their tasks not finished yet: queued, running or waiting."""
        wanted = list(identities)
        stmt = (
            select(col(TaskJournalRow.session_id), col(TaskJournalRow.task_hash))
            .join(MessageRow, col(MessageRow.id) == col(TaskJournalRow.user_message_id))
            .where(col(MessageRow.sender_key).in_(wanted))
        )

        def work(session: Session) -> list[tuple[str, str]]:
            return [(str(s), str(t)) for s, t in session.connection().execute(stmt).all()]

        return await self._db.read(work)

    async def erase_session(
        self, session_id: str, trace: SessionTrace, quotes: Collection[str] = ()
    ) -> SessionErasure:
        return await self._db.write(lambda s: _erase_session(s, session_id, trace, quotes))

    async def erase_names(self, identities: Collection[str], quotes: Collection[str]) -> int:
        """Blank the names of the sessions they own, and their words in any other name."""
        wanted = list(identities)
        return await self._db.write(lambda s: blank_session_names(s, wanted, quotes))

    async def erase_schedules(self, identities: Collection[str]) -> int:
        """Their schedules go: each holds a prompt they wrote."""
        wanted = list(identities)

        def work(session: Session) -> int:
            stmt = delete(ScheduleRow).where(col(ScheduleRow.created_by_id).in_(wanted))
            return int(session.connection().execute(stmt).rowcount)

        return await self._db.write(work)

    async def erase_memories(self, identities: Collection[str]) -> int:
        """What they asked the bot to remember goes."""
        wanted = list(identities)
        return await self._db.write(lambda s: erase_memories(s, wanted))

    async def compact(self) -> None:
        """SQLite: merge the full-text index (its segments still hold the erased entries until
        then), and empty the write-ahead log of the pages that held the old text."""
        if self._db.dialect != "sqlite":
            return

        def merge(session: Session) -> None:
            conn = session.connection()
            conn.exec_driver_sql("PRAGMA secure_delete=ON")
            conn.execute(text("INSERT INTO messages_fts5(messages_fts5) VALUES ('optimize')"))
            conn.exec_driver_sql("PRAGMA secure_delete=OFF")

        await self._db.write(merge)
        path = self._db.sqlite_path
        assert path is not None
        await asyncio.to_thread(_checkpoint, path)


def _checkpoint(path: Path) -> None:
    # A connection of its own: the writer's is inside a transaction whenever it works.
    conn = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
