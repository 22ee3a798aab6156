"""The journals of unfinished tasks, in the archive (`task_journal`).

A task's row is inserted in the transaction that archives its message, updated after every
step, and deleted in the transaction that records its end: at any moment, a row is a task a
restart must take up, and a task without one has not started or is over. What a step means is
the engine's business (`gateway.engine.journal`); here it is JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from gateway.clock import now_ms
from gateway.ids import validate_hash
from gateway.store.base import StoreBase
from gateway.store.db import insert_ignoring
from gateway.store.lean import Lean, Row
from gateway.store.models import CommandOnceRow, PromptAnswerRow, TaskJournalRow


@dataclass(frozen=True, slots=True)
class JournalRecord:
    task_hash: str
    session_id: str
    origin: dict[str, Any]
    text: str
    user_message_id: int
    user_sent_at: int
    submitted_at: int
    status: str = "queued"
    steps: tuple[dict[str, Any], ...] = ()
    prompt: dict[str, Any] | None = None


# Built once: these run for every task, and building a statement costs more than running it.
# Lean statements (gateway.store.lean): one of each per task.
_INSERT_JOURNAL = (
    "INSERT INTO task_journal (task_hash, session_id, origin, text, user_message_id,"
    " user_sent_at, submitted_at, status, steps, prompt, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_DELETE_JOURNAL = "DELETE FROM task_journal WHERE task_hash = ?"
JOURNAL_COLUMNS = (
    "task_hash, session_id, origin, text, user_message_id, user_sent_at, submitted_at, status,"
    " steps, prompt"
)
_UNFINISHED = f"SELECT {JOURNAL_COLUMNS} FROM task_journal ORDER BY user_message_id"
_UNFINISHED_OF = (
    f"SELECT {JOURNAL_COLUMNS} FROM task_journal WHERE session_id = ? ORDER BY user_message_id"
)
_JOURNAL = f"SELECT {JOURNAL_COLUMNS} FROM task_journal WHERE task_hash = ?"
_PROMPTING = f"SELECT {JOURNAL_COLUMNS} FROM task_journal WHERE prompt != ''"
_PROMPTING_OF = _PROMPTING + " AND session_id = ?"
_DELETE_ANSWERS = "DELETE FROM prompt_answer WHERE task_hash = ?"


def insert_journal(sql: Lean, record: JournalRecord) -> None:
    sql.run(_INSERT_JOURNAL, *journal_values(record))


def journal_values(record: JournalRecord) -> tuple[Any, ...]:
    """The journal's row, in the column order of `_INSERT_JOURNAL`."""
    return (
        validate_hash(record.task_hash),
        record.session_id,
        json.dumps(record.origin, ensure_ascii=False),
        # PostgreSQL text cannot hold NUL; the archive keeps the same replacement.
        record.text.replace("\x00", "\ufffd"),
        record.user_message_id,
        record.user_sent_at,
        record.submitted_at,
        record.status,
        json.dumps(list(record.steps), ensure_ascii=False),
        json.dumps(record.prompt, ensure_ascii=False) if record.prompt else "",
        now_ms(),
    )


def delete_journal(sql: Lean, task_hash: str) -> None:
    sql.run(_DELETE_JOURNAL, task_hash)
    sql.run(_DELETE_ANSWERS, task_hash)


class JournalArchive(StoreBase):
    async def save_journal(
        self,
        task_hash: str,
        *,
        status: str,
        steps: list[dict[str, Any]],
        prompt: dict[str, Any] | None,
        collected: Sequence[str] = (),
    ) -> None:
        """Record a task's progress; a task whose journal is gone (it ended) is left alone.
        `collected`: tasks whose messages it answers from now on (steered into it), whose
        journals go in the same transaction: each message has one task to answer it at any
        moment, whenever a crash comes."""
        stmt = (
            update(TaskJournalRow)
            .where(col(TaskJournalRow.task_hash) == task_hash)
            .values(
                status=status,
                steps=json.dumps(steps, ensure_ascii=False),
                prompt=json.dumps(prompt, ensure_ascii=False) if prompt else "",
                updated_at=now_ms(),
            )
        )
        gone = [delete(TaskJournalRow).where(col(TaskJournalRow.task_hash).in_(collected))]
        gone += [delete(PromptAnswerRow).where(col(PromptAnswerRow.task_hash).in_(collected))]

        def work(session: Session) -> None:
            session.connection().execute(stmt)
            if collected:
                for dropping in gone:
                    session.connection().execute(dropping)

        await self.db.write(work)

    async def insert_journal(self, record: JournalRecord) -> None:
        await self.db.write_lean(lambda sql: insert_journal(sql, record))

    async def drop_journal(self, task_hash: str) -> None:
        """The task ended without a run to record (canceled): it is not to be taken up."""
        await self.db.write_lean(lambda sql: delete_journal(sql, task_hash))

    async def unfinished(self, session_id: str | None = None) -> list[JournalRecord]:
        """Every journal in the archive (of one session, when given), in the order their
        messages were archived. Asked before and after every task run with several instances:
        plain SQL (gateway.store.lean)."""

        def work(sql: Lean) -> list[JournalRecord]:
            if session_id is None:
                return [journal_record(row) for row in sql.all(_UNFINISHED)]
            return [journal_record(row) for row in sql.all(_UNFINISHED_OF, session_id)]

        return await self.db.read_lean(work)


def journal_record(row: Row) -> JournalRecord:
    task_hash, session_id, origin, text, user_message_id, user_sent_at, submitted_at = row[:7]
    status, steps_json, prompt = row[7:]
    steps = _json(steps_json, [])
    return JournalRecord(
        task_hash=task_hash,
        session_id=session_id,
        origin=_json(origin, {}),
        text=text,
        user_message_id=user_message_id,
        user_sent_at=user_sent_at,
        submitted_at=submitted_at,
        status=status,
        steps=tuple(s for s in steps if isinstance(s, dict)) if isinstance(steps, list) else (),
        prompt=_json(prompt, None) if prompt else None,
    )


def _json(text: str, default: Any) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return default


class PromptAnswers(StoreBase):
    """Answers to prompts, given on any instance: the first one for a prompt stands; and
    gateway commands, run once per platform delivery."""

    async def journal(self, task_hash: str) -> JournalRecord | None:
        def work(sql: Lean) -> JournalRecord | None:
            row = sql.one(_JOURNAL, task_hash)
            return journal_record(row) if row is not None else None

        return await self.db.read_lean(work)

    async def claim_answer(
        self, session_id: str, task_hash: str, number: int, answer: dict[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        """Record `answer` to the task's prompt `number` unless it has one; returns whether
        this one was recorded, and the answer that stands."""
        body = json.dumps(answer, ensure_ascii=False)
        row = insert_ignoring(self.db.dialect, PromptAnswerRow).values(
            task_hash=task_hash,
            number=number,
            session_id=session_id,
            answer=body,
            answered_at=now_ms(),
        )
        stmt = select(PromptAnswerRow.answer).where(
            col(PromptAnswerRow.task_hash) == task_hash, col(PromptAnswerRow.number) == number
        )

        def work(session: Session) -> tuple[bool, str]:
            taken = session.connection().execute(row).rowcount == 1
            return taken, str(session.exec(stmt).one())

        taken, standing = await self.db.write(work)
        return taken, _json(standing, {})

    async def stored_answer(self, task_hash: str, number: int) -> dict[str, Any] | None:
        stmt = select(PromptAnswerRow.answer).where(
            col(PromptAnswerRow.task_hash) == task_hash, col(PromptAnswerRow.number) == number
        )

        def work(session: Session) -> str | None:
            return session.exec(stmt).first()

        found = await self.db.read(work)
        return _json(found, {}) if found is not None else None

    async def prompting(self, session_id: str | None = None) -> list[JournalRecord]:
        """Journals of tasks waiting on a prompt (of one session, when given)."""

        def work(sql: Lean) -> list[JournalRecord]:
            if session_id is None:
                return [journal_record(row) for row in sql.all(_PROMPTING)]
            return [journal_record(row) for row in sql.all(_PROMPTING_OF, session_id)]

        return await self.db.read_lean(work)

    async def first_delivery(self, source_key: str, session_id: str) -> bool:
        """Record a command's delivery id; False when it was recorded before (by this
        instance or another), so the command is not run again."""
        row = insert_ignoring(self.db.dialect, CommandOnceRow).values(
            source_key=source_key, session_id=session_id, handled_at=now_ms()
        )

        def work(session: Session) -> bool:
            return bool(session.connection().execute(row).rowcount == 1)

        return await self.db.write(work)
