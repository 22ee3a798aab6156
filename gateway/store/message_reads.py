"""Reading a session's archived messages: the newest ones, the start of a window, the newest
id, and those after a cursor (the summary's, history.json's)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func
from sqlmodel import Session, col, select

from gateway.ids import validate_session_id
from gateway.store.base import StoreBase
from gateway.store.lean import Lean
from gateway.store.models import MessageRow


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    session_id: str
    role: str
    content: str
    sender: str
    send_at: int
    task_hash: str = ""
    sender_key: str = ""  # who wrote it (`platform:sender id`); "" for the agent


class MessageReads(StoreBase):
    async def recent_messages(
        self, session_id: str, limit: int = 20, *, after_id: int = 0
    ) -> list[StoredMessage]:
        """The newest `limit` messages (newer than `after_id`), oldest first."""
        validate_session_id(session_id)
        stmt = (
            select(MessageRow)
            .where(MessageRow.session_id == session_id, col(MessageRow.id) > after_id)
            .order_by(col(MessageRow.id).desc())
            .limit(limit)
        )

        def work(session: Session) -> list[StoredMessage]:
            rows = session.exec(stmt).all()
            return [_stored(r) for r in reversed(rows)]

        return await self.db.read(work)

    async def window_start_id(self, session_id: str, window: int, *, after_id: int = 0) -> int:
        """Id of the oldest of the newest `window` messages after `after_id`; 0 when there are
        fewer than that. Ids only, so asking costs no message bodies."""
        validate_session_id(session_id)
        stmt = (
            select(MessageRow.id)
            .where(MessageRow.session_id == session_id, col(MessageRow.id) > after_id)
            .order_by(col(MessageRow.id).desc())
            .offset(max(window - 1, 0))
            .limit(1)
        )

        def work(session: Session) -> int:
            return int(session.exec(stmt).first() or 0)

        return await self.db.read(work)

    async def last_message_id(self, session_id: str) -> int:
        """Id of the session's newest archived message; 0 when it has none."""
        validate_session_id(session_id)
        stmt = select(func.max(MessageRow.id)).where(MessageRow.session_id == session_id)

        def work(session: Session) -> int:
            return int(session.exec(stmt).one() or 0)

        return await self.db.read(work)

    async def messages_after(
        self, session_id: str, after_id: int, limit: int = 500
    ) -> list[StoredMessage]:
        """Messages newer than `after_id` (e.g. the summary cursor), oldest first."""
        validate_session_id(session_id)

        def work(sql: Lean) -> list[StoredMessage]:
            return [StoredMessage(*row) for row in sql.all(_AFTER, session_id, after_id, limit)]

        return await self.db.read_lean(work, long=True)


# Lean (gateway.store.lean): the summary reads these every fold, history.json at a catch-up.
_AFTER = (
    "SELECT id, session_id, role, content, sender, send_at, task_hash FROM messages"
    " WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?"
)


def _stored(row: MessageRow) -> StoredMessage:
    assert row.id is not None
    return StoredMessage(
        row.id, row.session_id, row.role, row.content, row.sender, row.send_at, row.task_hash
    )
