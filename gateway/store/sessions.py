"""The session store: one place that keeps a session's files and its SQL rows in step.

`SessionStore` is assembled from one part per concern: the session rows and a session's
whole life (here), the message archive (`messages`), finished runs and file versions
(`runs`), on the state they share (`base`). The tables beside a session's life are reached
through repositories of their own: `outbox`, `usage`, `schedules`, `search` and `vectors`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Collection, Sequence
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from gateway.clock import now_ms
from gateway.crash import NO_CRASH, CrashPoints
from gateway.ids import validate_session_id
from gateway.logs import get_logger
from gateway.settings import Settings
from gateway.store.actionlog import ActionKind, ActionRecord
from gateway.store.base import SessionTaken, UnknownSession
from gateway.store.console_signins import ConsoleSignins
from gateway.store.db import Database, insert_ignoring
from gateway.store.journals import JournalArchive, PromptAnswers
from gateway.store.knowledge import KnowledgeArchive
from gateway.store.listing import SessionCursor, SessionInfo, SessionListing
from gateway.store.member_memories import MemberMemories
from gateway.store.message_reads import StoredMessage
from gateway.store.messages import MessageArchive
from gateway.store.models import PER_SESSION_TABLES, SessionRow, SessionSettings
from gateway.store.outbox import Outbox
from gateway.store.ownership import Ownership
from gateway.store.read_ahead import ReadAhead
from gateway.store.removal import SessionRemoval
from gateway.store.request_keys import RequestKeys
from gateway.store.runs import RunArchive, RunRecord
from gateway.store.schedules import ScheduleTable
from gateway.store.search import Search
from gateway.store.source_marks import latest_sources
from gateway.store.summaries import Position, SummaryArchive
from gateway.store.usage import Usage
from gateway.store.vectors import VectorArchive

_EXISTS_SQL = "SELECT 1 FROM session WHERE id = ?"
_SETTINGS_SQL = "SELECT settings FROM session WHERE id = ?"

__all__ = [
    "RunRecord",
    "SessionCursor",
    "SessionInfo",
    "SessionStore",
    "StoredMessage",
    "UnknownSession",
]

log = get_logger(__name__)

T = TypeVar("T")


def _with_option(row: SessionRow, key: str, value: Any) -> str:
    """The row's `settings` JSON with one option changed."""
    options = row.options
    options[key] = value
    return json.dumps(options, ensure_ascii=False)


class SessionStore(
    SessionListing,
    MessageArchive,
    RunArchive,
    JournalArchive,
    PromptAnswers,
    SummaryArchive,
    RequestKeys,
):
    def __init__(self, settings: Settings, db: Database) -> None:
        super().__init__(settings, db)
        self.outbox = Outbox(db)
        self.usage = Usage(db)
        self.schedules = ScheduleTable(db)
        self.search = Search(db)
        self.ownership = Ownership(db)
        self.console_signins = ConsoleSignins(db)
        self.member_memories = MemberMemories(db)
        self.knowledge = KnowledgeArchive(db)
        # One for the whole store: it remembers whether pgvector is there once asked.
        self.vectors = VectorArchive(db)
        self.removal = SessionRemoval(db, self.dirs, self.trash)
        self.positions_ahead = ReadAhead[Position]()

    @classmethod
    async def open(cls, settings: Settings, *, crash: CrashPoints = NO_CRASH) -> SessionStore:
        """`crash`: where a crash test may stop the process (inside a group commit too)."""
        db = await Database.open(settings.resolved_database_url, crash=crash)
        return cls(settings, db)

    async def close(self) -> None:
        await self.trash.close()
        try:
            held = await self.write_held_lines()  # their last chance: they live in memory
        except Exception:
            log.exception("held action.log lines not written before the stop")
        else:
            if held:
                log.error("action.log lines lost: still no room at the stop", bytes=held)
        await asyncio.to_thread(self.file_calls.close)
        await self.db.close()

    async def write_held_lines(self) -> int:
        """Write the `action.log` lines sessions hold for want of room (a disk that was full)
        without waiting for their next line; returns the bytes still held."""
        return await self.file_calls.submit(self.dirs.write_held)

    async def ping(self) -> None:
        """One trivial query; raises unless the database answers (a readiness check)."""
        await self.db.ping()

    async def has_room(self) -> bool:
        """Whether writes have room now (False while they fail for lack of space)."""
        return await self.db.space.available()

    async def latest_sources(self, session_prefix: str, key_prefix: str) -> dict[str, str]:
        """`{session id: source key}` of the newest message each session of a kind archived
        from one platform (where reading that platform's backlog starts)."""
        return await latest_sources(self.db, session_prefix, key_prefix)

    async def ensure(
        self, session_id: str, *, name: str = "", owner: str = "", claim: bool = False
    ) -> SessionRow:
        """The session's row, creating it (owned by `owner`) and its directory if this is its
        first message. With `claim`, one found owned by another raises `SessionTaken` (see
        `take_in`): one conditional insert decides who made a new id."""
        validate_session_id(session_id)
        await asyncio.to_thread(self.dirs.create, session_id)
        now = now_ms()
        made = SessionRow(id=session_id, name=name, owner=owner, created_at=now, updated_at=now)

        def work(session: Session) -> SessionRow:
            insert = insert_ignoring(self.db.dialect, SessionRow)
            session.connection().execute(insert.values(**made.model_dump()))
            row = session.get(SessionRow, session_id)
            assert row is not None
            if claim and row.owner != owner:
                raise SessionTaken(session_id)
            return row

        return await self.db.write(work)

    async def get(self, session_id: str) -> SessionRow | None:
        validate_session_id(session_id)

        def work(session: Session) -> SessionRow | None:
            return session.get(SessionRow, session_id)

        return await self.db.read(work)

    async def exists(self, session_id: str) -> bool:
        """Whether the session is in the archive: one lean read, asked of every message."""
        validate_session_id(session_id)
        found = await self.db.read_lean(lambda sql: sql.value(_EXISTS_SQL, session_id))
        return found is not None

    async def queue_mode(self, session_id: str) -> str:
        """The session's queue mode (`/queue`), read without the rest of its row."""
        validate_session_id(session_id)
        settings = await self.db.read_lean(lambda sql: sql.value(_SETTINGS_SQL, session_id))
        return SessionSettings("", "", "", "", settings or "").queue_mode

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

        changed = await self.db.write(work)
        self.positions_ahead.forget(session_id)  # a read ahead of it has the settings before
        return changed

    async def set_tool_allowed(self, session_id: str, tool: str, allowed: bool) -> frozenset[str]:
        """Add a tool to (or take it off) the session's allow-list; returns the new list."""

        def change(row: SessionRow) -> frozenset[str]:
            tools = set(row.allowed_tools)
            if allowed:
                tools.add(tool)
            else:
                tools.discard(tool)
            row.settings = _with_option(row, "allowed_tools", sorted(tools))
            return frozenset(tools)

        return await self._change_row(session_id, change)

    async def adopt(
        self,
        session_id: str,
        *,
        parent_session: str,
        parent_task: str,
        persona: str,
        model: str,
        reasoning: str,
        allowed_tools: frozenset[str],
        owner: str = "",
    ) -> None:
        """Make `session_id` a subagent session of `parent_task`, with its parent's agent,
        owned by `owner` (whom the parent task acts for)."""
        await self.ensure(session_id, owner=owner)

        def change(row: SessionRow) -> None:
            row.role = row.rule = persona
            row.model, row.reasoning = model, reasoning
            options = row.options
            options["parent"] = {"session": parent_session, "task": parent_task}
            options["allowed_tools"] = sorted(allowed_tools)
            row.settings = json.dumps(options, ensure_ascii=False)

        await self._change_row(session_id, change)

    async def set_queue_mode(self, session_id: str, mode: str) -> None:
        def change(row: SessionRow) -> None:
            row.settings = _with_option(row, "queue_mode", mode)

        await self._change_row(session_id, change)

    async def _change_row(self, session_id: str, change: Callable[[SessionRow], T]) -> T:
        def work(session: Session) -> T:
            row = session.get(SessionRow, validate_session_id(session_id))
            if row is None:
                raise UnknownSession(session_id)
            result = change(row)
            row.updated_at = now_ms()
            session.add(row)
            return result

        changed = await self.db.write(work)
        self.positions_ahead.forget(session_id)  # a read ahead of it has the settings before
        return changed

    async def delete(self, session_id: str) -> bool:
        """Remove the session: its rows in every per-session table, its row, its folder.

        The full-text index follows the messages by itself: on SQLite the FTS5 table's
        triggers drop a deleted message's entry, and PostgreSQL's trigram index is an index.
        """
        return bool(await self.removal.delete_many([session_id]))

    async def rename(self, old: str, new: str) -> bool:
        """Carry a session over to a new id (a Telegram group that became a supergroup).

        Rows of every per-session table follow; the folder is renamed when the new id has
        none yet. Returns False when `old` does not exist. If `new` already has a session,
        the old one's rows join it and the old folder is left in place. The full-text index
        is keyed by message id, which a rename keeps, so it needs nothing.
        """
        validate_session_id(old)
        validate_session_id(new)

        def exists(session: Session, session_id: str) -> bool:
            stmt = select(SessionRow.id).where(col(SessionRow.id) == session_id)
            return session.exec(stmt).first() is not None

        def work(session: Session) -> bool:
            if not exists(session, old):
                return False
            conn = session.connection()
            for table in PER_SESSION_TABLES:
                conn.execute(update(table).where(table.c.session_id == old).values(session_id=new))
            the_old = col(SessionRow.id) == old
            if exists(session, new):
                conn.execute(delete(SessionRow).where(the_old))
            else:
                conn.execute(update(SessionRow).where(the_old).values(id=new))
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

    async def log_action(
        self,
        session_id: str,
        kind: ActionKind | str,
        body: str,
        *,
        window_hash: str = "",
        task_hash: str = "",
        identity: str = "",
    ) -> ActionRecord:
        records = await self.log_actions(
            session_id,
            [(kind, body)],
            window_hash=window_hash,
            task_hash=task_hash,
            identity=identity,
        )
        return records[0]

    async def log_actions(
        self,
        session_id: str,
        entries: Sequence[tuple[ActionKind | str, str]],
        *,
        window_hash: str = "",
        task_hash: str = "",
        identity: str = "",
    ) -> list[ActionRecord]:
        """Lines of one task in `action.log`, in order, in one write."""
        log_file = self.files(session_id).action_log
        lines = partial(
            log_file.append_all,
            entries,
            window_hash=window_hash,
            task_hash=task_hash,
            identity=identity,
        )
        return await self.file_calls.submit(lines)
