"""What a finished task leaves in the archive: its reply, its `action_history` row and the
outbox entries carrying the reply, written together; and the file versions it saw."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import ColumnElement
from sqlmodel import Session, col, select

from gateway.clock import now_ms
from gateway.ids import validate_hash, validate_session_id
from gateway.logs import get_logger
from gateway.store import pg_writes
from gateway.store.base import StoreBase
from gateway.store.db import insert_ignoring
from gateway.store.journals import delete_journal
from gateway.store.lean import Lean, Row
from gateway.store.message_reads import StoredMessage
from gateway.store.messages import history_line, insert_message, touch_session
from gateway.store.models import ActionHistoryRow, FileHistoryRow
from gateway.store.outbox import OutboxEntry, OutboxItem, claim_in
from gateway.store.usage import UsageRecord, insert_usage

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RunRecord:
    session_id: str
    task_hash: str
    objective: str
    reply: str
    tool_results: Sequence[dict[str, Any]] = field(default_factory=tuple)
    # Model calls not recorded yet (the last one's usage comes with the run).
    usage: Sequence[UsageRecord] = field(default_factory=tuple)
    # Whom the task acted for (`Origin.sender_key`): its requester, a schedule's creator, a
    # subagent's parent's requester.
    identity: str = ""


# Lean statements (gateway.store.lean): one of each per task.
_ALREADY = "SELECT id FROM action_history WHERE session_id = ? AND task_hash = ?"
_INSERT_RUN = (
    "INSERT INTO action_history (session_id, task_hash, objective, tool_results, reply,"
    " identity, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def _the_run(session_id: str, task_hash: str) -> tuple[ColumnElement[bool], ...]:
    return (
        col(ActionHistoryRow.session_id) == session_id,
        col(ActionHistoryRow.task_hash) == task_hash,
    )


class RunArchive(StoreBase):
    async def finish_run(
        self,
        run: RunRecord,
        reply: str,
        *,
        sender: str,
        outbox: Sequence[OutboxEntry] = (),
        lines_first: Callable[[], None] | None = None,
    ) -> list[OutboxItem]:
        """Store a finished run in one transaction: the reply message, the run's row, the
        outbox entries that will carry the reply to the user, and the end of the task's
        journal — so a restart finds the task either finished or to be taken up, never both.

        Idempotent per task: a task replayed after a restart finds its run recorded and adds
        neither a second reply nor a second outbox entry. `lines_first` (the run's action.log
        lines) is done before the transaction may commit, in the write's own hand-off off the
        event loop; it may be called again when the write is retried.
        """
        validate_session_id(run.session_id)
        validate_hash(run.task_hash)
        at = now_ms()
        # PostgreSQL text cannot hold NUL; the archive keeps the same replacement everywhere.
        reply = reply.replace("\x00", "\ufffd")
        objective = run.objective.replace("\x00", "\ufffd")
        reply_message = StoredMessage(
            0, run.session_id, "assistant", reply, sender, at, task_hash=run.task_hash
        )
        filed: list[StoredMessage] = []

        def record(sql: Lean) -> None:
            filed.clear()
            if sql.one(_ALREADY, run.session_id, run.task_hash) is None:
                if reply:
                    touch_session(sql, run.session_id, at)
                    reply_id = insert_message(sql, reply_message)
                    assert reply_id is not None
                    filed.append(replace(reply_message, id=reply_id))
                tool_results = json.dumps(list(run.tool_results), ensure_ascii=False)
                sql.run(
                    _INSERT_RUN,
                    run.session_id,
                    run.task_hash,
                    objective,
                    tool_results,
                    reply,
                    run.identity,
                    at,
                )
                for record in run.usage:
                    insert_usage(sql, record)
            delete_journal(sql, run.task_hash)

        def lean(sql: Lean) -> list[OutboxItem]:
            record(sql)
            return [claim_in(sql, entry) for entry in outbox]

        def file_reply(_: object) -> None:
            try:
                self.file_committed(run.session_id, [history_line(m) for m in filed])
            except FileNotFoundError:
                log.warning("session deleted before its reply was filed", session=run.session_id)

        async with self._archive_turn(run.session_id):
            if self.db.dialect == "postgresql" and not outbox and len(run.usage) <= 1:
                # What `record` does, as one statement: one round trip instead of nine.
                statement, params = pg_writes.finish_run(
                    run.session_id,
                    run.task_hash,
                    objective,
                    list(run.tool_results),
                    reply,
                    run.identity,
                    at,
                    sender,
                    run.usage[0] if run.usage else None,
                )

                def file_returned(rows: list[Row]) -> None:
                    reply_id = rows[0][0]
                    if reply_id is not None:
                        filed.append(replace(reply_message, id=int(reply_id)))
                    file_reply(None)

                # Again after a cut connection, it finds the run recorded and does nothing.
                await self.db.write_one(
                    statement,
                    *params,
                    repeatable=True,
                    after_commit=file_returned,
                    before=lines_first,
                )
                return []
            return await self.db.write_lean(lean, after_commit=file_reply, before=lines_first)

    async def finished_run(self, session_id: str, task_hash: str) -> dict[str, str] | None:
        """The recorded outcome of a finished task: objective and reply (empty on error)."""
        validate_session_id(session_id)
        stmt = select(ActionHistoryRow).where(*_the_run(session_id, task_hash))

        def work(session: Session) -> dict[str, str] | None:
            row = session.exec(stmt).first()
            if row is None:
                return None
            return {"objective": row.objective, "reply": row.reply}

        return await self.db.read(work)

    async def run_recorded(self, session_id: str, task_hash: str) -> bool:
        stmt = select(ActionHistoryRow.id).where(*_the_run(session_id, task_hash))

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
        stmt = insert_ignoring(self.db.dialect, FileHistoryRow).values(
            session_id=session_id,
            task_id=task_id,
            dir=directory,
            name=name,
            content=content,
            created_at=now_ms(),
        )

        def work(session: Session) -> bool:
            return bool(session.connection().execute(stmt).rowcount)

        return await self.db.write(work)
