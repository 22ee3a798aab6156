"""What the instance that runs a session reads before each of its tasks, when several instances
share the archive: the session's journals (tasks another instance stored for it) and what
`MessageArchive.resync_history` compares to bring history.json in line with the archive (the
summary, and the ids of the archived messages from the file's recent lines on), and where the
task's context starts (gateway/store/read_ahead.py).

All come from one statement: on PostgreSQL each statement is a round trip, and these three were
made before every task.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.store.history_file import HistoryMessage
from gateway.store.journals import JOURNAL_COLUMNS, JournalRecord, journal_record
from gateway.store.lean import Lean
from gateway.store.summaries import (
    LATEST_CTE,
    OLDEST_CTE,
    POSITION_COLUMNS,
    NoSummaryRow,
    Position,
    SummaryState,
    archived_state,
    position_of,
)

# A session's history.json is caught up with at most this many messages at once (more than
# a crash can leave behind, and the file keeps only the recent conversation anyway).
HISTORY_CATCH_UP = 500

_IDS_CTE = """ids AS (
    SELECT id FROM messages WHERE session_id = ? AND id >= ? AND ? > 0 ORDER BY id LIMIT ?
)"""
_LATEST_AND_IDS = f"WITH {LATEST_CTE}, {_IDS_CTE}\n"
# The session's newest summary row (NULLs when none) beside each id of its archived messages
# from a first one on (none when the first is 0). Parameters: session, session, first, first,
# limit.
_VIEW = (
    _LATEST_AND_IDS
    + "SELECT latest.summary, latest.cursor, latest.reset_at, latest.updated_at, ids.id"
    " FROM (SELECT 1 AS here) AS here LEFT JOIN latest ON 1 = 1 LEFT JOIN ids ON 1 = 1"
    " ORDER BY ids.id"
)
# The same rows (kind 1, in five columns, each with the task's position in the eight after
# them) after the session's journals (kind 0, in the ten before them), in the order their
# messages were archived. Parameters: session, session, first, first, limit, session, window,
# window - 1, session, session, session.
_PADDING = ", ".join(["NULL"] * (5 + 8))
_JOURNALS_PADDING = ", ".join(["NULL"] * len(JOURNAL_COLUMNS.split(",")))
_JOURNALS_AND_VIEW = (
    f"WITH {LATEST_CTE}, {_IDS_CTE}, {OLDEST_CTE}\n"
    f"SELECT 0, {JOURNAL_COLUMNS}, {_PADDING} FROM task_journal WHERE session_id = ?"
    f" UNION ALL SELECT 1, {_JOURNALS_PADDING},"
    " latest.summary, latest.cursor, latest.reset_at, latest.updated_at, ids.id,"
    f" {POSITION_COLUMNS}"
    " FROM (SELECT 1 AS here) AS here LEFT JOIN latest ON 1 = 1 LEFT JOIN ids ON 1 = 1"
    " LEFT JOIN session ON session.id = ?"
    " ORDER BY 1, 6, 16"
)


@dataclass(frozen=True, slots=True)
class ResyncView:
    """history.json's recent lines (None: the session has no folder) and the archive's side."""

    tail: list[HistoryMessage] | None
    state: SummaryState | NoSummaryRow | None = None
    archived_ids: tuple[int, ...] = ()

    @property
    def first(self) -> int:
        """The first id the comparison starts from: the file's earliest recent one (0: none)."""
        return first_id(self.tail)


def first_id(tail: list[HistoryMessage] | None) -> int:
    ids = [m.id for m in tail or () if m.id]
    return min(ids) if ids else 0


def resync_view(sql: Lean, session_id: str, tail: list[HistoryMessage] | None) -> ResyncView:
    """The archive's side of the comparison with `tail`."""
    first = first_id(tail)
    rows = sql.all(_VIEW, session_id, session_id, first, first, HISTORY_CATCH_UP)
    ids = tuple(int(row[4]) for row in rows if row[4] is not None)
    return ResyncView(tail, archived_state(rows[0][:4]), ids)


def journals_and_view(
    sql: Lean, session_id: str, tail: list[HistoryMessage] | None, window: int
) -> tuple[list[JournalRecord], ResyncView, Position]:
    """The session's journals, in archive order, `resync_view(tail)` and the position of a
    task's context for `window` (`gateway.store.summaries.context_read`), in one statement."""
    first = first_id(tail)
    rows = sql.all(
        _JOURNALS_AND_VIEW,
        session_id,
        session_id,
        first,
        first,
        HISTORY_CATCH_UP,
        session_id,
        window,
        max(window - 1, 0),
        session_id,
        session_id,
        session_id,
    )
    journals = [journal_record(row[1:11]) for row in rows if row[0] == 0]
    view = [row[11:] for row in rows if row[0] == 1]
    ids = tuple(int(row[4]) for row in view if row[4] is not None)
    position = position_of((*view[0][:4], *view[0][5:]), window)
    return journals, ResyncView(tail, archived_state(view[0][:4]), ids), position
