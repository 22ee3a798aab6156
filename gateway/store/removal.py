"""Sessions removed many at a time (the reaper): which are idle, and their rows and folders gone.

A commit costs far more than the rows it removes: it writes every page the transaction touched
(the session-id indexes put each session's rows on pages of their own) and, past the WAL's
limit, checkpoints them; a pass that commits every few thousand sessions pays it over and over.
So a pass removes sessions in chunks of `DELETE_CHUNK`, named once in a temporary table that
every table's DELETE reads, and holds one transaction for as many chunks as `TRANSACTION_SECONDS`
allows, unless live writes are waiting behind it (SQLite has one writer): then it commits after
the chunk in hand and lets them in. A transaction's folders go to the trash while the next
one runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from functools import partial

from sqlalchemy import text
from sqlmodel import Session, col, select

from gateway.ids import validate_session_id
from gateway.logs import get_logger
from gateway.store.db import Database
from gateway.store.files import SessionsDir
from gateway.store.listing import parent_of
from gateway.store.models import PER_SESSION_TABLES, SessionRow, TaskJournalRow
from gateway.store.trash import TrashEmptier

# Sessions per statement: under 999, the bound-parameter limit of older SQLite.
DELETE_CHUNK = 900
# How long one transaction of a pass may hold the writer when nothing else waits for it.
TRANSACTION_SECONDS = 1.0
# The chunk's ids, on the connection's own temporary table.
DOOMED = "removed_session_ids"

log = get_logger(__name__)


class SessionRemoval:
    def __init__(self, db: Database, dirs: SessionsDir, trash: TrashEmptier) -> None:
        self.db, self.dirs, self.trash = db, dirs, trash

    async def delete_many(
        self, session_ids: Sequence[str], *, unless_active_since: int | None = None
    ) -> list[str]:
        """Rows in every per-session table, the session rows, then the folders (into the
        trash, emptied in the background), a transaction at a time. Returns the ids that had
        a row or a folder.

        `unless_active_since` (the reaper's idle cut-off, in ms): a session active since then,
        or with a task stored and not finished, is left whole. It is checked in the
        transaction that deletes, so a message taken in, or a task taken up from its journal,
        after the caller judged the session idle keeps its session."""
        ids = [validate_session_id(sid) for sid in session_ids]
        gone: list[str] = []
        folders: asyncio.Task[list[str]] | None = None
        start = 0
        try:
            while start < len(ids):
                end, had, spared = await self.db.write(
                    partial(
                        _delete_rows,
                        ids=ids,
                        start=start,
                        busy=self.db.writes_waiting,
                        unless_active_since=unless_active_since,
                    )
                )
                if folders is not None:
                    moving, folders = folders, None  # awaited here: its error goes up from here
                    gone += await moving
                batch = [sid for sid in ids[start:end] if sid not in spared]
                folders = asyncio.create_task(self._folders_gone(batch, had))
                start = end
            if folders is not None:
                moving, folders = folders, None
                gone += await moving
        finally:
            if folders is not None:  # left behind when the pass stopped early
                _let_go(folders)
        self.trash.kick()
        return gone

    async def _folders_gone(self, batch: list[str], had: set[str]) -> list[str]:
        """`batch`'s folders into the trash; the ids that had a row or a folder."""
        removed = await asyncio.to_thread(self.dirs.delete_many, batch)
        return [sid for sid in batch if sid in had or sid in removed]

    async def idle_ids(self, prefix: str, before_ms: int) -> list[str]:
        """Ids of the sessions with `prefix` not active since `before_ms`."""
        stmt = select(SessionRow.id).where(
            col(SessionRow.id).startswith(prefix, autoescape=True),
            col(SessionRow.updated_at) <= before_ms,
        )
        return await self.db.read(lambda session: [str(i) for i in session.exec(stmt).all()])

    async def parents(self, session_ids: Sequence[str]) -> dict[str, str]:
        """The parent session of each of `session_ids` that is a subagent's."""
        ids = list(session_ids)

        def work(session: Session) -> dict[str, str]:
            found: dict[str, str] = {}
            for start in range(0, len(ids), DELETE_CHUNK):
                stmt = select(SessionRow.id, SessionRow.settings).where(
                    col(SessionRow.id).in_(ids[start : start + DELETE_CHUNK]),
                    col(SessionRow.settings).contains('"parent"'),
                )
                for sid, settings in session.exec(stmt).all():
                    parent = parent_of(settings)
                    if parent:
                        found[sid] = parent
            return found

        return await self.db.read(work) if ids else {}

    async def existing_ids(self) -> set[str]:
        stmt = select(SessionRow.id)
        return await self.db.read(lambda session: {str(i) for i in session.exec(stmt).all()})


def _let_go(folders: asyncio.Task[list[str]]) -> None:
    """A pass that stopped early (a stop, a failed write) leaves its last folders: those still
    moving are canceled (the next pass takes what is left); a move that failed is said here,
    not left for the loop to call an exception nobody retrieved."""
    if not folders.done():
        folders.cancel()
    elif not folders.cancelled() and (error := folders.exception()) is not None:
        log.warning("moving removed sessions' folders to the trash failed", error=repr(error))


def _delete_rows(
    session: Session,
    ids: list[str],
    start: int,
    busy: Callable[[], bool],
    unless_active_since: int | None,
) -> tuple[int, set[str], set[str]]:
    """From `ids[start:]`, one chunk, then more while the transaction's time lasts and no
    other write is `busy` waiting: where it stopped, which of them had a session row, and
    which were spared as active (see `SessionRemoval.delete_many`). Run again from the same
    `start` if retried."""
    conn = session.connection()
    quote = conn.dialect.identifier_preparer.quote
    conn.execute(text(f"CREATE TEMPORARY TABLE IF NOT EXISTS {DOOMED} (id TEXT PRIMARY KEY)"))
    doomed = f"(SELECT id FROM {DOOMED})"
    began = time.monotonic()
    had: set[str] = set()
    spared: set[str] = set()
    journals = quote(TaskJournalRow.__tablename__)
    sessions = quote(SessionRow.__tablename__)
    end = start
    while end < len(ids) and (
        end == start or (time.monotonic() - began < TRANSACTION_SECONDS and not busy())
    ):
        chunk = ids[end : end + DELETE_CHUNK]
        conn.execute(text(f"DELETE FROM {DOOMED}"))
        conn.execute(text(f"INSERT INTO {DOOMED} (id) VALUES (:id)"), [{"id": s} for s in chunk])
        if unless_active_since is not None:
            if conn.dialect.name == "postgresql":
                # A message taken in for one of them updates its session row first: with the
                # rows locked here, it is either seen below with its journal, or it waits for
                # this transaction and then finds no session (and makes it anew). SQLite's
                # one writer orders them already.
                locking = f"SELECT id FROM {sessions} WHERE id IN {doomed} ORDER BY id FOR UPDATE"
                conn.execute(text(locking))
            active = (
                f"SELECT session_id FROM {journals} WHERE session_id IN {doomed}"
                f" UNION SELECT id FROM {sessions} WHERE id IN {doomed} AND updated_at > :since"
            )
            since = {"since": unless_active_since}
            kept = {str(sid) for sid in conn.execute(text(active), since).scalars()}
            if kept:
                spared |= kept
                conn.execute(text(f"DELETE FROM {DOOMED} WHERE id IN ({active})"), since)
        for table in PER_SESSION_TABLES:
            conn.execute(text(f"DELETE FROM {quote(table.name)} WHERE session_id IN {doomed}"))
        rows = conn.execute(text(f"SELECT id FROM {sessions} WHERE id IN {doomed}"))
        had.update(str(sid) for sid in rows.scalars())
        conn.execute(text(f"DELETE FROM {sessions} WHERE id IN {doomed}"))
        end += len(chunk)
    conn.execute(text(f"DELETE FROM {DOOMED}"))  # nothing of it kept on a pooled connection
    return end, had, spared
