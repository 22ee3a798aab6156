"""Listings of the archive a page at a time: the sessions a caller may see, most recently
active first, and a session's messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sqlalchemy import func, literal, tuple_
from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from gateway.ids import validate_session_id
from gateway.ownership import ShareMode
from gateway.store.base import StoreBase
from gateway.store.message_reads import StoredMessage
from gateway.store.models import MessageRow, SessionRow, SessionShareRow
from gateway.store.ownership import EVERYTHING, Visibility

# Sessions whose messages are counted per statement: under 999, the bound-parameter limit of
# older SQLite.
COUNT_CHUNK: Final = 900


@dataclass(frozen=True, slots=True)
class SessionCursor:
    """Where a page of sessions ends: the last session it showed."""

    updated_at: int
    session_id: str


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    name: str
    updated_at: int
    message_count: int
    parent: str = ""  # the session whose task started this subagent session


def parent_of(settings: str) -> str:
    if '"parent"' not in settings:  # most sessions: no JSON to decode
        return ""
    link = SessionRow(id="-", settings=settings).parent
    return link[0] if link else ""


class SessionListing(StoreBase):
    async def list_sessions(
        self,
        visible: Visibility = EVERYTHING,
        *,
        prefix: str | None = None,
        after: SessionCursor | None = None,
        limit: int | None = None,
    ) -> list[SessionInfo]:
        """The sessions `visible` shows (of `prefix`), most recently active first: all of
        them, or a page of `limit` after the one `after` names."""
        stmt = sa_select(
            col(SessionRow.id),
            col(SessionRow.name),
            col(SessionRow.updated_at),
            col(SessionRow.settings),
        ).where(visible.condition(col(SessionRow.id)))
        if prefix is not None:
            stmt = stmt.where(col(SessionRow.id).startswith(f"{prefix}-"))
        if after is not None:
            stmt = stmt.where(
                tuple_(col(SessionRow.updated_at), col(SessionRow.id))
                < tuple_(literal(after.updated_at), literal(after.session_id))
            )
        stmt = stmt.order_by(col(SessionRow.updated_at).desc(), col(SessionRow.id).desc())
        if limit is not None:
            stmt = stmt.limit(limit)

        def work(session: Session) -> list[SessionInfo]:
            connection = session.connection()
            rows = connection.execute(stmt).all()
            # Counted for the page only: a count of every session's messages grew with the
            # archive, whatever the page.
            counts: dict[str, int] = {}
            ids = [row[0] for row in rows]
            for start in range(0, len(ids), COUNT_CHUNK):
                chunk = ids[start : start + COUNT_CHUNK]
                counted = connection.execute(
                    sa_select(col(MessageRow.session_id), func.count())
                    .where(col(MessageRow.session_id).in_(chunk))
                    .group_by(col(MessageRow.session_id))
                ).all()
                counts.update({str(sid): int(n) for sid, n in counted})
            return [
                SessionInfo(sid, name, updated, counts.get(sid, 0), parent_of(settings))
                for sid, name, updated, settings in rows
            ]

        return await self.db.read(work)

    async def message_page(
        self,
        session_id: str,
        limit: int,
        *,
        before_id: int | None = None,
        after_id: int | None = None,
    ) -> list[StoredMessage]:
        """`limit` of the session's messages, oldest first: the newest ones (older than
        `before_id`), or the oldest ones newer than `after_id` (the page after one shown). By
        id, which only grows: a page stays the same as new messages arrive."""
        validate_session_id(session_id)
        row = sa_select(
            col(MessageRow.id),
            col(MessageRow.session_id),
            col(MessageRow.role),
            col(MessageRow.content),
            col(MessageRow.sender),
            col(MessageRow.send_at),
            col(MessageRow.task_hash),
        ).where(col(MessageRow.session_id) == session_id)
        if after_id is not None:
            stmt = row.where(col(MessageRow.id) > after_id).order_by(col(MessageRow.id))
        else:
            if before_id is not None:
                row = row.where(col(MessageRow.id) < before_id)
            stmt = row.order_by(col(MessageRow.id).desc())
        stmt = stmt.limit(limit)

        def work(session: Session) -> list[StoredMessage]:
            found = [
                StoredMessage(int(mid or 0), sid, role, content, sender, send_at, task)
                for mid, sid, role, content, sender, send_at, task in session.connection()
                .execute(stmt)
                .all()
            ]
            return found if after_id is not None else found[::-1]

        return await self.db.read(work)

    async def share_page(
        self, session_id: str, limit: int, *, after: str = ""
    ) -> list[tuple[str, ShareMode]]:
        """`limit` of the identities the session is shared with (and how), by identity, past
        the identity `after`."""
        stmt = (
            sa_select(col(SessionShareRow.identity), col(SessionShareRow.mode))
            .where(
                col(SessionShareRow.session_id) == session_id,
                col(SessionShareRow.identity) > after,
            )
            .order_by(col(SessionShareRow.identity))
            .limit(limit)
        )

        def work(session: Session) -> list[tuple[str, ShareMode]]:
            rows = session.connection().execute(stmt).all()
            return [(str(identity), ShareMode(mode)) for identity, mode in rows]

        return await self.db.read(work)
