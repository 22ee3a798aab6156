"""A session's rolling summary, kept in the archive and copied to its folder.

The archive's copy is the one that counts: with several instances, whichever runs the session
next reads the summary and its cursor from there. `summary.json` and `.summary_cursor` in the
session folder are written after it, for people and tools that read the folder; a session
whose summary predates the archive's copy is read from its files.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Final

from sqlmodel import Session, col, select

from gateway.ids import validate_session_id
from gateway.store.base import StoreBase
from gateway.store.db import Database
from gateway.store.files import SessionFiles, Summary
from gateway.store.fslock import SessionDirectoryMissing
from gateway.store.history_file import HistoryMessage
from gateway.store.lean import Lean, Row
from gateway.store.models import SessionSettings, SessionSummaryRow
from gateway.store.read_ahead import ReadAhead


@dataclass(frozen=True, slots=True)
class SummaryState:
    summary: Summary
    reset_at: int  # the last message before the latest /reset: the window starts after it


@dataclass(frozen=True, slots=True)
class ContextRead:
    summary: Summary | None
    settings: SessionSettings | None  # None: the session has no row (yet)
    due: int  # how many messages a fold would take now
    recent: list[HistoryMessage]  # history.json's last lines, oldest first


class NoSummaryRow:
    """The archive has no summary row for the session yet (not even an empty one)."""


NO_ROW: Final = NoSummaryRow()
Archived = SummaryState | NoSummaryRow | None  # what the archive holds for a session

# Read before every task and after it (is a fold due?): lean statements (gateway.store.lean).
_LATEST = (
    "SELECT summary, cursor, reset_at, updated_at FROM session_summary"
    " WHERE session_id = ? ORDER BY id DESC LIMIT 1"
)
_WINDOW_START = (
    "SELECT id FROM messages WHERE session_id = ? AND id > ? ORDER BY id DESC LIMIT 1 OFFSET ?"
)
_COUNT_BETWEEN = "SELECT count(*) FROM messages WHERE session_id = ? AND id > ? AND id < ?"
# Before every task and after it, in one statement (on PostgreSQL each is a round trip): the
# newest summary row (NULLs when there is none), the oldest of the `window` newest messages
# after its cursor (none when fewer, or no window) and how many lie between the cursor and
# it (what a fold would take), and the session's settings (NULLs when it has no row). Its
# parts are also read with a session's journals (gateway/store/resync.py).
# Parameters: session.
LATEST_CTE = """latest AS (
    SELECT summary, cursor, reset_at, updated_at FROM session_summary
    WHERE session_id = ? ORDER BY id DESC LIMIT 1
)"""
# After `latest`. Parameters: session, window, window - 1.
OLDEST_CTE = """oldest AS (
    SELECT id FROM messages
    WHERE session_id = ? AND id > COALESCE((SELECT cursor FROM latest), 0) AND ? > 0
    ORDER BY id DESC LIMIT 1 OFFSET ?
)"""
# Columns 5 to 12 of a position, from `oldest` and a join of `session`. Parameters: session.
POSITION_COLUMNS = """(SELECT id FROM oldest),
    (SELECT count(*) FROM messages WHERE session_id = ?
        AND id > COALESCE((SELECT cursor FROM latest), 0) AND id < (SELECT id FROM oldest)),
    session.id, session.role, session.rule, session.model, session.reasoning, session.settings"""
# Parameters: session, session, window, window - 1, session, session.
_POSITION = f"""
WITH {LATEST_CTE}, {OLDEST_CTE}
SELECT latest.summary, latest.cursor, latest.reset_at, latest.updated_at, {POSITION_COLUMNS}
FROM (SELECT 1 AS here) AS here
LEFT JOIN latest ON 1 = 1
LEFT JOIN session ON session.id = ?
"""
_DELETE_SUMMARY = "DELETE FROM session_summary WHERE session_id = ?"
_INSERT_SUMMARY = (
    "INSERT INTO session_summary (session_id, summary, cursor, reset_at, updated_at)"
    " VALUES (?, ?, ?, ?, ?)"
)


def latest_state(sql: Lean, session_id: str) -> SummaryState | NoSummaryRow | None:
    """The archived summary of a session, None for the empty row (no summary yet), or NO_ROW."""
    return archived_state(sql.one(_LATEST, session_id))


def archived_state(row: Row | None) -> Archived:
    """A summary row's (summary, cursor, reset_at, updated_at) as the archive holds it."""
    if row is None or row[0] is None:  # no row, or a LEFT JOIN's NULLs for one
        return NO_ROW
    text, cursor, reset_at, updated_at = row
    if not updated_at and not cursor and not text:
        return None  # the empty row left by the import below: no summary yet
    return SummaryState(Summary(text, cursor, updated_at), reset_at)


def window_start(sql: Lean, session_id: str, window: int, after_id: int) -> int:
    """Id of the oldest of the newest `window` messages after `after_id`; 0 when fewer."""
    return int(sql.value(_WINDOW_START, session_id, after_id, max(window - 1, 0)) or 0)


def _fold_position(sql: Lean, session_id: str, window: int, cursor: int) -> tuple[int, int]:
    """The oldest message of the window after `cursor` (0 when fewer), and how many lie between
    the cursor and it: what a fold would take."""
    oldest = window_start(sql, session_id, window, cursor)
    if not oldest:
        return 0, 0
    return oldest, int(sql.value(_COUNT_BETWEEN, session_id, cursor, oldest) or 0)


@dataclass(frozen=True, slots=True)
class Position:
    state: Archived
    oldest: int  # the oldest message of the window after the summary's cursor; 0 when fewer
    due: int  # how many messages lie between the cursor and it
    settings: SessionSettings | None


def position_of(row: Row, window: int) -> Position:
    """A `_POSITION` row: the summary, where the window starts after it, and the settings.
    With no summary row the window is not placed (the files may hold a summary to move over
    first)."""
    state = archived_state(row[:4])
    settings = SessionSettings(*row[7:]) if row[6] is not None else None
    if isinstance(state, NoSummaryRow) or not window:
        return Position(state, 0, 0, settings)
    return Position(state, int(row[4] or 0), int(row[5] or 0) if row[4] else 0, settings)


def _position(sql: Lean, session_id: str, window: int) -> Position:
    row = sql.one(
        _POSITION, session_id, session_id, window, max(window - 1, 0), session_id, session_id
    )
    assert row is not None, "one row whatever the session holds"
    return position_of(row, window)


async def summary_state(db: Database, files: SessionFiles, session_id: str) -> SummaryState | None:
    """The session's summary as the archive has it. The first time a session is asked for
    without a row, the summary its files hold (one written before summaries were archived)
    is moved into the archive — or an empty one, so later reads need no file."""
    archived = await db.read_lean(lambda sql: latest_state(sql, session_id))
    if not isinstance(archived, NoSummaryRow):
        return archived
    try:
        found = await asyncio.to_thread(files.read_summary)
    except FileNotFoundError:
        return None  # no folder here yet: nothing to move, ask again next time
    # An empty summary in the files is what /reset left.
    state = SummaryState(found, found.cursor if not found.text else 0) if found else None
    await _archive(db, session_id, state)
    return state


async def _archive(db: Database, session_id: str, state: SummaryState | None) -> None:
    summary = state.summary if state else Summary("", 0, 0)

    def work(session: Session) -> None:
        if session.exec(stmt).first() is None:  # no other writer got there first
            session.add(
                SessionSummaryRow(
                    session_id=session_id,
                    summary=summary.text,
                    cursor=summary.cursor,
                    reset_at=state.reset_at if state else 0,
                    updated_at=summary.updated_at,
                )
            )

    stmt = select(SessionSummaryRow.id).where(col(SessionSummaryRow.session_id) == session_id)
    await db.write(work)


class SummaryArchive(StoreBase):
    # Where a task's context starts, read with its session's journals just before it
    # (gateway/store/read_ahead.py); set by the store.
    positions_ahead: ReadAhead[Position]

    async def summary_state(self, session_id: str) -> SummaryState | None:
        validate_session_id(session_id)
        return await summary_state(self.db, self.files(session_id), session_id)

    async def summary(self, session_id: str) -> Summary | None:
        state = await self.summary_state(session_id)
        return state.summary if state else None

    async def fold_position(
        self, session_id: str, window: int
    ) -> tuple[SummaryState | None, int, int]:
        """Whether a fold may be due, in one read: the summary (and last /reset), the id of
        the oldest message of the `window` newest after its cursor (0 when fewer), and how many
        messages lie between the cursor and that one (the ones a fold would take)."""
        validate_session_id(session_id)

        def position(sql: Lean, cursor: int) -> tuple[int, int]:
            return _fold_position(sql, session_id, window, cursor)

        def work(sql: Lean) -> tuple[Archived, int, int]:
            found = _position(sql, session_id, window)
            return found.state, found.oldest, found.due

        state, oldest, due = await self.db.read_lean(work)
        if isinstance(state, NoSummaryRow):  # the first time: the files may hold one to move over
            state = await self.summary_state(session_id)
            cursor = state.summary.cursor if state else 0
            oldest, due = await self.db.read_lean(lambda sql: position(sql, cursor))
        return state, oldest, due

    async def context_read(self, session_id: str, window: int = 0, tail: int = 0) -> ContextRead:
        """What a task's context reads: from the archive the summary, the session's settings
        and (given the `window`) how many messages a fold would take now, and the last `tail`
        lines of history.json — in one read."""
        validate_session_id(session_id)
        history = self.files(session_id).history

        def recent() -> list[HistoryMessage]:
            try:
                return history.tail(tail)
            except SessionDirectoryMissing:
                return []

        def work(sql: Lean) -> Position:
            return _position(sql, session_id, window)

        ahead = self.positions_ahead.take(session_id, window)
        if ahead is None:
            found, lines = await self.db.read_lean_beside(work, recent)
        else:
            found, lines = ahead, await self.db.beside(recent)
        state, row, due = found.state, found.settings, found.due
        if isinstance(state, NoSummaryRow):
            state = await self.summary_state(session_id)
        return ContextRead(state.summary if state else None, row, due, lines)

    async def save_summary(self, session_id: str, summary: Summary, *, reset_at: int = -1) -> None:
        """Make `summary` the session's; `reset_at` (the last /reset) is kept unless given."""
        validate_session_id(session_id)
        if reset_at < 0:
            state = await self.summary_state(session_id)
            reset_at = state.reset_at if state else 0

        def work(sql: Lean) -> None:
            # A fold's write, once a task past the window: plain SQL (`lean`), not the ORM.
            sql.run(_DELETE_SUMMARY, session_id)
            sql.run(
                _INSERT_SUMMARY,
                session_id,
                summary.text,
                summary.cursor,
                reset_at,
                summary.updated_at,
            )

        await self.db.write_lean(work)
        self.positions_ahead.forget(session_id)  # a read ahead of it has the summary before
        # No folder here yet: it is made on this instance when the session first stores here.
        with contextlib.suppress(SessionDirectoryMissing):
            await asyncio.to_thread(self.files(session_id).write_summary, summary)

    async def reset_conversation(self, session_id: str, last_message_id: int, at: int) -> None:
        """Empty the conversation window and the summary; the archive keeps every message.

        The window starts after `last_message_id` (the newest archived message), and nothing
        before it is folded into a summary again — on every instance: the one that runs the
        session next drops the older lines of its history.json."""
        summary = Summary("", last_message_id, at)
        await self.save_summary(session_id, summary, reset_at=last_message_id)
        await asyncio.to_thread(self.files(session_id).history.replace, [])
