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

from sqlalchemy import delete
from sqlmodel import Session, col, select

from gateway.ids import validate_session_id
from gateway.store.base import StoreBase
from gateway.store.db import Database
from gateway.store.files import SessionFiles, Summary
from gateway.store.fslock import SessionDirectoryMissing
from gateway.store.models import SessionSummaryRow


@dataclass(frozen=True, slots=True)
class SummaryState:
    summary: Summary
    reset_at: int  # the last message before the latest /reset: the window starts after it


async def summary_state(db: Database, files: SessionFiles, session_id: str) -> SummaryState | None:
    """The session's summary as the archive has it. The first time a session is asked for
    without a row, the summary its files hold (one written before summaries were archived)
    is moved into the archive — or an empty one, so later reads need no file."""
    stmt = (
        select(SessionSummaryRow)
        .where(col(SessionSummaryRow.session_id) == session_id)
        .order_by(col(SessionSummaryRow.id).desc())
        .limit(1)
    )

    def work(session: Session) -> SessionSummaryRow | None:
        return session.exec(stmt).first()

    row = await db.read(work)
    if row is not None:
        if not row.updated_at and not row.cursor and not row.summary:
            return None  # the empty row left by the import below: no summary yet
        return SummaryState(Summary(row.summary, row.cursor, row.updated_at), row.reset_at)
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
    async def summary_state(self, session_id: str) -> SummaryState | None:
        validate_session_id(session_id)
        return await summary_state(self.db, self.files(session_id), session_id)

    async def summary(self, session_id: str) -> Summary | None:
        state = await self.summary_state(session_id)
        return state.summary if state else None

    async def save_summary(self, session_id: str, summary: Summary, *, reset_at: int = -1) -> None:
        """Make `summary` the session's; `reset_at` (the last /reset) is kept unless given."""
        validate_session_id(session_id)
        if reset_at < 0:
            state = await self.summary_state(session_id)
            reset_at = state.reset_at if state else 0

        def work(session: Session) -> None:
            session.connection().execute(
                delete(SessionSummaryRow).where(col(SessionSummaryRow.session_id) == session_id)
            )
            session.add(
                SessionSummaryRow(
                    session_id=session_id,
                    summary=summary.text,
                    cursor=summary.cursor,
                    reset_at=reset_at,
                    updated_at=summary.updated_at,
                )
            )

        await self.db.write(work)
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
