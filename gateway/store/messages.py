"""The message archive: every message of a session as a SQL row, filed in history.json in the
order of its archive id."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from sqlalchemy import bindparam, case, func, insert, update
from sqlalchemy.engine import Connection
from sqlmodel import Session, col, select

from gateway.clock import now_ms
from gateway.ids import validate_hash, validate_session_id
from gateway.store.base import StoreBase, UnknownSession
from gateway.store.db import insert_ignoring
from gateway.store.history_file import HistoryMessage
from gateway.store.models import MessageRow, SessionRow

# Built once: constructing and compiling statements per message cost more than running them.
_TOUCH_SESSION = (
    update(SessionRow)
    .where(col(SessionRow.id) == bindparam("sid"))
    .values(
        updated_at=case(
            (col(SessionRow.updated_at) < bindparam("at"), bindparam("at")),
            else_=col(SessionRow.updated_at),
        )
    )
)
_INSERT_MESSAGE = insert(MessageRow).returning(col(MessageRow.id))


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    session_id: str
    role: str
    content: str
    sender: str
    send_at: int
    task_hash: str = ""


def touch_session(conn: Connection, session_id: str, at: int) -> bool:
    """Move the session's last activity up to `at`; False when the session has no row."""
    return bool(conn.execute(_TOUCH_SESSION, {"sid": session_id, "at": at}).rowcount)


def insert_message(conn: Connection, message: StoredMessage) -> int:
    """Archive `message` (its `id` is ignored); returns the id the archive gave it."""
    values = {
        "session_id": message.session_id,
        "role": message.role,
        "content": message.content,
        "sender": message.sender,
        "send_at": message.send_at,
        "task_hash": message.task_hash,
    }
    message_id = conn.execute(_INSERT_MESSAGE, values).scalar_one()
    assert message_id is not None
    return message_id


class MessageArchive(StoreBase):
    async def append_message(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        sender: str = "",
        send_at: int | None = None,
        task_hash: str = "",
        write_history: bool = True,
        create_session: bool = False,
    ) -> StoredMessage:
        """Archive one message in SQL, then add it to history.json.

        SQL goes first: its id is what the summary cursor refers to, and it is the durable copy
        from which history.json could be rebuilt. `write_history=False` archives only (imports,
        and the benchmark separating the two costs). `create_session` makes a session that
        does not exist yet (its folder, and its row in the message's own transaction) instead
        of failing with UnknownSession: the path of every inbound message.
        """
        validate_session_id(session_id)
        if create_session:
            await asyncio.to_thread(self.dirs.create, session_id)
        new_row = insert_ignoring(self.db.dialect, SessionRow)
        if task_hash:
            validate_hash(task_hash)
        at = send_at if send_at is not None else now_ms()
        # PostgreSQL text cannot hold NUL; store the same replacement character on every backend.
        content = content.replace("\x00", "\ufffd")
        sender = sender.replace("\x00", "\ufffd")
        unfiled = StoredMessage(0, session_id, role, content, sender, at, task_hash)

        def work(session: Session) -> StoredMessage:
            conn = session.connection()
            if not touch_session(conn, session_id, at):
                if not create_session:
                    raise UnknownSession(session_id)
                conn.execute(new_row.values(id=session_id, created_at=at, updated_at=at))
            return replace(unfiled, id=insert_message(conn, unfiled))

        if not write_history:
            return await self.db.write(work)
        history = self.files(session_id).history
        line = HistoryMessage(role, content, at, sender)
        async with self._archive_turn(session_id):
            return await self.db.write(work, after_commit=lambda _: history.append(line))

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
        stmt = (
            select(MessageRow)
            .where(MessageRow.session_id == session_id, col(MessageRow.id) > after_id)
            .order_by(col(MessageRow.id))
            .limit(limit)
        )

        def work(session: Session) -> list[StoredMessage]:
            return [_stored(r) for r in session.exec(stmt).all()]

        return await self.db.read(work)


def _stored(row: MessageRow) -> StoredMessage:
    assert row.id is not None
    return StoredMessage(
        row.id, row.session_id, row.role, row.content, row.sender, row.send_at, row.task_hash
    )
