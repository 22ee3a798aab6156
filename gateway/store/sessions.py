"""The session store: one place that keeps a session's files and its SQL rows in step."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, case, func, insert, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Session, col, select

from gateway.clock import now_ms
from gateway.ids import validate_hash, validate_session_id
from gateway.logs import get_logger
from gateway.settings import Settings
from gateway.store.actionlog import ActionKind, ActionRecord
from gateway.store.db import Database
from gateway.store.files import SessionFiles, SessionsDir
from gateway.store.history_file import HistoryMessage
from gateway.store.models import (
    ActionHistoryRow,
    FileHistoryRow,
    MessageRow,
    SessionRow,
)
from gateway.store.outbox import OutboxEntry, OutboxItem, claim_in

log = get_logger(__name__)


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


class UnknownSession(LookupError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no such session: {session_id}")
        self.session_id = session_id


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    session_id: str
    role: str
    content: str
    sender: str
    send_at: int
    task_hash: str = ""


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    name: str
    updated_at: int
    message_count: int


@dataclass(frozen=True, slots=True)
class RunRecord:
    session_id: str
    task_hash: str
    objective: str
    reply: str
    tool_results: Sequence[dict[str, Any]] = field(default_factory=tuple)


class SessionStore:
    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self.dirs = SessionsDir(
            settings.sessions_dir,
            history_max_bytes=settings.history_max_bytes,
            action_log_max_bytes=settings.action_log_max_bytes,
        )
        # Per session: a lock over "insert a message, then file it in history.json", and how
        # many hold or wait for it (the lock is dropped when nobody does).
        self._archiving: dict[str, tuple[asyncio.Lock, int]] = {}

    @classmethod
    async def open(cls, settings: Settings) -> SessionStore:
        db = await Database.open(settings.resolved_database_url)
        return cls(settings, db)

    async def close(self) -> None:
        await self.db.close()

    def files(self, session_id: str) -> SessionFiles:
        return self.dirs.get(session_id)

    @contextlib.asynccontextmanager
    async def _archive_turn(self, session_id: str) -> AsyncIterator[None]:
        """One message write of the session at a time, so history.json lists a session's
        messages in the order of their archive ids whoever writes them (the intake, a reply)."""
        lock, users = self._archiving.get(session_id, (asyncio.Lock(), 0))
        self._archiving[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._archiving[session_id]
            if users == 1:
                del self._archiving[session_id]
            else:
                self._archiving[session_id] = (lock, users - 1)

    # -- sessions --------------------------------------------------------------------------

    async def ensure(self, session_id: str, *, name: str = "") -> SessionRow:
        """The session's row, creating it and its directory if this is its first message."""
        validate_session_id(session_id)
        await asyncio.to_thread(self.dirs.create, session_id)
        now = now_ms()

        def work(session: Session) -> SessionRow:
            row = session.get(SessionRow, session_id)
            if row is None:
                row = SessionRow(id=session_id, name=name, created_at=now, updated_at=now)
                session.add(row)
            return row

        return await self.db.write(work)

    async def get(self, session_id: str) -> SessionRow | None:
        validate_session_id(session_id)

        def work(session: Session) -> SessionRow | None:
            return session.get(SessionRow, session_id)

        return await self.db.read(work)

    async def require(self, session_id: str) -> SessionRow:
        row = await self.get(session_id)
        if row is None:
            raise UnknownSession(session_id)
        return row

    async def update(
        self, session_id: str, *, allowed_tools: Collection[str] | None = None, **changes: str
    ) -> SessionRow:
        """Change name, model, reasoning, self_id or persona (`persona=` sets role and rule),
        and replace the tool allow-list when `allowed_tools` is given — all in one transaction."""
        allowed = {"name", "model", "reasoning", "self_id", "persona", "settings"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"unknown session fields: {sorted(unknown)}")

        def work(session: Session) -> SessionRow:
            row = session.get(SessionRow, validate_session_id(session_id))
            if row is None:
                raise UnknownSession(session_id)
            for key, value in changes.items():
                if key == "persona":
                    # Older readers look at `rule`; keep both until they are gone.
                    row.role = row.rule = value
                else:
                    setattr(row, key, value)
            if allowed_tools is not None:
                options = row.options
                options["allowed_tools"] = sorted(set(allowed_tools))
                row.settings = json.dumps(options, ensure_ascii=False)
            row.updated_at = now_ms()
            session.add(row)
            return row

        return await self.db.write(work)

    async def set_tool_allowed(self, session_id: str, tool: str, allowed: bool) -> frozenset[str]:
        """Add a tool to (or take it off) the session's allow-list; returns the new list."""

        def work(session: Session) -> frozenset[str]:
            row = session.get(SessionRow, validate_session_id(session_id))
            if row is None:
                raise UnknownSession(session_id)
            tools = set(row.allowed_tools)
            if allowed:
                tools.add(tool)
            else:
                tools.discard(tool)
            options = row.options
            options["allowed_tools"] = sorted(tools)
            row.settings = json.dumps(options, ensure_ascii=False)
            row.updated_at = now_ms()
            session.add(row)
            return frozenset(tools)

        return await self.db.write(work)

    async def list_sessions(self) -> list[SessionInfo]:
        counts = (
            select(MessageRow.session_id, func.count().label("n"))
            .group_by(MessageRow.session_id)
            .subquery()
        )
        stmt = (
            select(SessionRow.id, SessionRow.name, SessionRow.updated_at, counts.c.n)
            .outerjoin(counts, counts.c.session_id == SessionRow.id)
            .order_by(col(SessionRow.updated_at).desc())
        )

        def work(session: Session) -> list[SessionInfo]:
            rows = session.exec(stmt).all()
            return [SessionInfo(sid, name, updated, int(n or 0)) for sid, name, updated, n in rows]

        return await self.db.read(work)

    async def delete(self, session_id: str) -> bool:
        validate_session_id(session_id)

        def work(session: Session) -> bool:
            conn = session.connection()
            params = {"sid": session_id}
            for table in ("messages", "action_history", "file_history", "usage"):
                conn.execute(text(f"DELETE FROM {table} WHERE session_id = :sid"), params)
            result = conn.execute(text("DELETE FROM session WHERE id = :sid"), params)
            return bool(result.rowcount)

        existed = await self.db.write(work)
        removed = await asyncio.to_thread(self.dirs.delete, session_id)
        return existed or removed

    async def rename(self, old: str, new: str) -> bool:
        """Carry a session over to a new id (a Telegram group that became a supergroup).

        Rows of every table follow; the folder is renamed when the new id has none yet.
        Returns False when `old` does not exist. If `new` already has a session, the old
        one's rows join it and the old folder is left in place.
        """
        validate_session_id(old)
        validate_session_id(new)

        def work(session: Session) -> bool:
            conn = session.connection()
            params = {"old": old, "new": new}
            if conn.execute(text("SELECT 1 FROM session WHERE id = :old"), params).first() is None:
                return False
            for table in ("messages", "action_history", "file_history", "usage", "outbox"):
                conn.execute(
                    text(f"UPDATE {table} SET session_id = :new WHERE session_id = :old"), params
                )
            if conn.execute(text("SELECT 1 FROM session WHERE id = :new"), params).first():
                conn.execute(text("DELETE FROM session WHERE id = :old"), params)
            else:
                conn.execute(text("UPDATE session SET id = :new WHERE id = :old"), params)
            return True

        moved = await self.db.write(work)
        if moved:
            await asyncio.to_thread(self._rename_dir, old, new)
        return moved

    def _rename_dir(self, old: str, new: str) -> None:
        source, target = self.dirs.path_of(old), self.dirs.path_of(new)
        if source.is_dir() and not target.exists():
            source.rename(target)
        elif source.is_dir():
            log.warning("both sessions have folders; the old one is kept", old=old, new=new)

    # -- messages --------------------------------------------------------------------------

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
        new_row = self._insert_ignoring(SessionRow)
        if task_hash:
            validate_hash(task_hash)
        at = send_at if send_at is not None else now_ms()
        # PostgreSQL text cannot hold NUL; store the same replacement character on every backend.
        content = content.replace("\x00", "\ufffd")
        sender = sender.replace("\x00", "\ufffd")

        values = {
            "session_id": session_id,
            "role": role,
            "content": content,
            "sender": sender,
            "send_at": at,
            "task_hash": task_hash,
        }

        def work(session: Session) -> StoredMessage:
            conn = session.connection()
            if not conn.execute(_TOUCH_SESSION, {"sid": session_id, "at": at}).rowcount:
                if not create_session:
                    raise UnknownSession(session_id)
                conn.execute(new_row.values(id=session_id, created_at=at, updated_at=at))
            message_id = conn.execute(_INSERT_MESSAGE, values).scalar_one()
            assert message_id is not None
            return StoredMessage(message_id, session_id, role, content, sender, at, task_hash)

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

    # -- audit trail -----------------------------------------------------------------------

    async def log_action(
        self,
        session_id: str,
        kind: ActionKind | str,
        body: str,
        *,
        window_hash: str = "",
        task_hash: str = "",
    ) -> ActionRecord:
        log_file = self.files(session_id).action_log
        return await asyncio.to_thread(
            log_file.append, kind, body, window_hash=window_hash, task_hash=task_hash
        )

    async def record_run(self, run: RunRecord) -> None:
        """The finished run's row; recording the same task twice keeps the first."""
        validate_session_id(run.session_id)
        validate_hash(run.task_hash)
        values = {
            "session_id": run.session_id,
            "task_hash": run.task_hash,
            "objective": run.objective,
            "tool_results": json.dumps(list(run.tool_results), ensure_ascii=False),
            "reply": run.reply,
            "created_at": now_ms(),
        }
        await self._insert_ignore(ActionHistoryRow, values)

    async def finish_run(
        self, run: RunRecord, reply: str, *, sender: str, outbox: Sequence[OutboxEntry] = ()
    ) -> list[OutboxItem]:
        """Store a finished run in one transaction: the reply message, the run's row and the
        outbox entries that will carry the reply to the user.

        Idempotent per task: a task replayed after a restart finds its run recorded and adds
        neither a second reply nor a second outbox entry.
        """
        validate_session_id(run.session_id)
        validate_hash(run.task_hash)
        at = now_ms()
        already = select(ActionHistoryRow.id).where(
            col(ActionHistoryRow.session_id) == run.session_id,
            col(ActionHistoryRow.task_hash) == run.task_hash,
        )
        dialect = self.db.dialect
        wrote_reply = False

        def work(session: Session) -> list[OutboxItem]:
            nonlocal wrote_reply
            conn = session.connection()
            if session.exec(already).first() is None:
                if reply:
                    conn.execute(_TOUCH_SESSION, {"sid": run.session_id, "at": at})
                    conn.execute(
                        _INSERT_MESSAGE,
                        {
                            "session_id": run.session_id,
                            "role": "assistant",
                            "content": reply,
                            "sender": sender,
                            "send_at": at,
                            "task_hash": run.task_hash,
                        },
                    )
                    wrote_reply = True
                conn.execute(
                    insert(ActionHistoryRow).values(
                        session_id=run.session_id,
                        task_hash=run.task_hash,
                        objective=run.objective,
                        tool_results=json.dumps(list(run.tool_results), ensure_ascii=False),
                        reply=reply,
                        created_at=at,
                    )
                )
            return [claim_in(session, dialect, entry) for entry in outbox]

        history = self.files(run.session_id).history

        def file_reply(_: object) -> None:
            if not wrote_reply:
                return
            try:
                history.append(HistoryMessage("assistant", reply, at, sender))
            except FileNotFoundError:
                log.warning("session deleted before its reply was filed", session=run.session_id)

        async with self._archive_turn(run.session_id):
            return await self.db.write(work, after_commit=file_reply)

    async def finished_run(self, session_id: str, task_hash: str) -> dict[str, str] | None:
        """The recorded outcome of a finished task: objective and reply (empty on error)."""
        validate_session_id(session_id)
        stmt = select(ActionHistoryRow).where(
            col(ActionHistoryRow.session_id) == session_id,
            col(ActionHistoryRow.task_hash) == task_hash,
        )

        def work(session: Session) -> dict[str, str] | None:
            row = session.exec(stmt).first()
            if row is None:
                return None
            return {"objective": row.objective, "reply": row.reply}

        return await self.db.read(work)

    async def run_recorded(self, session_id: str, task_hash: str) -> bool:
        stmt = select(ActionHistoryRow.id).where(
            col(ActionHistoryRow.session_id) == session_id,
            col(ActionHistoryRow.task_hash) == task_hash,
        )

        def work(session: Session) -> bool:
            return session.exec(stmt).first() is not None

        return await self.db.read(work)

    async def record_file_version(
        self, session_id: str, task_id: str, directory: str, name: str, content: str
    ) -> bool:
        """Keep the version of a file a task saw first; later saves in that task are no-ops.

        Returns whether this call stored a row.
        """
        validate_session_id(session_id)
        values = {
            "session_id": session_id,
            "task_id": task_id,
            "dir": directory,
            "name": name,
            "content": content,
            "created_at": now_ms(),
        }
        return await self._insert_ignore(FileHistoryRow, values)

    def _insert_ignoring(self, model: type[Any]) -> Any:
        """INSERT … ON CONFLICT DO NOTHING in the database's dialect; `.values()` to be added."""
        insert = sqlite_insert if self.db.dialect == "sqlite" else pg_insert
        return insert(model).on_conflict_do_nothing()

    async def _insert_ignore(self, model: type[Any], values: dict[str, Any]) -> bool:
        stmt = self._insert_ignoring(model).values(**values)

        def work(session: Session) -> bool:
            conn = session.connection()
            result = conn.execute(stmt)
            return bool(result.rowcount)

        return await self.db.write(work)


def _stored(row: MessageRow) -> StoredMessage:
    assert row.id is not None
    return StoredMessage(
        row.id, row.session_id, row.role, row.content, row.sender, row.send_at, row.task_hash
    )
