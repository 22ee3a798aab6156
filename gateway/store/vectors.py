"""The embeddings of a session's messages and summaries in the archive, and their cursor.

Vectors are stored as float32 bytes in SQL (`embedding`), so they last, and every instance on
one PostgreSQL database shares them; each instance searches them through an index of its own
built from these rows (`gateway.memory.index`). Nothing here needs numpy: the store hands out
bytes.

The cursor (`embedding_cursor`) says how far a session's embeddings reach. Rows and the cursor
move in one transaction, and only from the position the writer read (compare and set): a
failed batch leaves the cursor where it was, and two writers never skip a message between
them. A session's embeddings are made with one model; a model change is taken up only by
`agenvoy reindex` (`reset`), which drops them and starts a new epoch.
"""

from __future__ import annotations

import uuid
from array import array
from dataclasses import dataclass

from sqlalchemy import bindparam, delete, func, insert, or_, text
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from gateway.ids import validate_session_id
from gateway.store.db import Database
from gateway.store.lean import Lean
from gateway.store.message_reads import StoredMessage
from gateway.store.models import (
    EmbeddingCursorRow,
    EmbeddingRow,
    MessageRow,
    SessionRow,
    SessionSummaryRow,
)
from gateway.store.ownership import Visibility

MESSAGE = "message"
SUMMARY = "summary"


@dataclass(frozen=True, slots=True)
class Cursor:
    model: str
    message_cursor: int
    summary_cursor: int
    epoch: str


@dataclass(frozen=True, slots=True)
class Item:
    """One thing to embed: a message (by id), or a version of the summary by its cursor (the
    last message it covers: one of its own session's, so no other session's summary has it,
    and a later fold's is higher)."""

    kind: str
    message_id: int
    text: str


@dataclass(frozen=True, slots=True)
class VectorRows:
    """A session's message vectors after some row, as its index loads them."""

    epoch: str  # "" when the session has no cursor (nothing embedded, or deleted)
    row_ids: list[int]
    message_ids: list[int]
    vectors: list[bytes]


_CURSOR = (
    "SELECT model, message_cursor, summary_cursor, epoch FROM embedding_cursor"
    " WHERE session_id = ? ORDER BY id DESC LIMIT 1"
)
_PENDING = "SELECT id, content FROM messages WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?"
_NEWEST_SUMMARY = (
    "SELECT cursor, summary FROM session_summary WHERE session_id = ? ORDER BY id DESC LIMIT 1"
)


_CURSOR_LOCKED = _CURSOR + " FOR UPDATE"  # PostgreSQL: two instances cannot both move it
_INSERT_EMBEDDING = (
    "INSERT INTO embedding (session_id, kind, message_id, model, dim, vector, text)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
# The vector goes as pgvector's text form, named as text so the driver need not know the type.
_TO_PGVECTOR = (
    "INSERT INTO embedding_pgvector (id, vec) VALUES (?, CAST(CAST(? AS text) AS vector))"
)
_MESSAGE_ROWS = (
    "SELECT id, message_id, vector FROM embedding"
    " WHERE session_id = ? AND model = ? AND id > ? AND kind = ? ORDER BY id"
)
_NEW_CURSOR = (
    "INSERT INTO embedding_cursor (session_id, model, message_cursor, summary_cursor, epoch)"
    " VALUES (?, ?, ?, ?, ?)"
)
_MOVE_CURSOR = (
    "UPDATE embedding_cursor SET message_cursor = ?, summary_cursor = ? WHERE session_id = ?"
)


def _read_cursor(sql: Lean, session_id: str, *, lock: bool = False) -> Cursor | None:
    """The session's newest cursor row; `lock` holds it to the end of the transaction (on
    SQLite the writer's transaction holds the whole database already)."""
    locking = lock and sql.dialect == "postgresql"
    row = sql.one(_CURSOR_LOCKED if locking else _CURSOR, session_id)
    return Cursor(str(row[0]), int(row[1]), int(row[2]), str(row[3])) if row else None


def _text_of(item: Item) -> str:
    return item.text if item.kind == SUMMARY else ""  # a message's text is in `messages`


def _new_epoch() -> str:
    return uuid.uuid4().hex[:16]


def vector_literal(blob: bytes) -> str:
    """A float32 vector as pgvector's text form, `[0.1,0.2]` (no numpy in the store)."""
    return "[" + ",".join(repr(x) for x in array("f", blob)) + "]"


_PG_SEARCH = text(
    "SELECT e.message_id, 1 - (v.vec <=> CAST(:q AS vector)) AS score"
    " FROM embedding e JOIN embedding_pgvector v ON v.id = e.id"
    " WHERE e.session_id = :sid AND e.model = :model AND e.kind = 'message'"
    " AND (:before = 0 OR e.message_id < :before) AND vector_dims(v.vec) = :dim"
    " ORDER BY v.vec <=> CAST(:q AS vector) LIMIT :k"
)
# The same over several sessions at once: still exact, still only the sessions named.
_PG_SEARCH_SESSIONS = text(
    "SELECT e.session_id, e.message_id, 1 - (v.vec <=> CAST(:q AS vector)) AS score"
    " FROM embedding e JOIN embedding_pgvector v ON v.id = e.id"
    " WHERE e.session_id IN :sids AND e.model = :model AND e.kind = 'message'"
    " AND vector_dims(v.vec) = :dim"
    " ORDER BY v.vec <=> CAST(:q AS vector) LIMIT :k"
).bindparams(bindparam("sids", expanding=True))


class VectorArchive:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._pgvector: bool | None = None  # whether migration 0012 made its table here

    async def uses_pgvector(self) -> bool:
        """Whether vectors also go to pgvector (PostgreSQL with the extension), where recall
        is one SQL query; asked once."""
        if self._pgvector is None:
            if self.db.dialect != "postgresql":
                self._pgvector = False
            else:
                probe = text("SELECT to_regclass('embedding_pgvector') IS NOT NULL")
                self._pgvector = bool(
                    await self.db.read(lambda session: session.connection().execute(probe).scalar())
                )
        return self._pgvector

    async def pg_search(
        self, session_id: str, model: str, query: bytes, k: int, before: int
    ) -> list[tuple[int, float]]:
        """The `k` nearest message vectors of one session by pgvector's cosine distance: the
        session is a condition of the query itself, and the search is exact."""
        params = {
            "q": vector_literal(query),
            "sid": session_id,
            "model": model,
            "before": before,
            "dim": len(query) // 4,
            "k": k,
        }
        rows = await self.db.read(
            lambda session: session.connection().execute(_PG_SEARCH, params).all()
        )
        return [(int(m), float(s)) for m, s in rows]

    async def pg_search_sessions(
        self, session_ids: list[str], model: str, query: bytes, k: int
    ) -> list[tuple[str, int, float]]:
        """The `k` nearest message vectors among the sessions `session_ids`, by pgvector's
        cosine distance, as (session, message id, score): one exact query for them all."""
        if not session_ids:
            return []
        params = {
            "q": vector_literal(query),
            "sids": list(session_ids),
            "model": model,
            "dim": len(query) // 4,
            "k": k,
        }
        rows = await self.db.read(
            lambda session: session.connection().execute(_PG_SEARCH_SESSIONS, params).all()
        )
        return [(str(sid), int(m), float(score)) for sid, m, score in rows]

    async def searchable_sessions(self, model: str, visible: Visibility, limit: int) -> list[str]:
        """Sessions `visible` shows that have something embedded with `model`, the most
        recently active first, at most `limit`: what a search across sessions looks in."""
        embedded = select(EmbeddingCursorRow.session_id).where(
            col(EmbeddingCursorRow.model) == model,
            or_(
                col(EmbeddingCursorRow.message_cursor) > 0,
                col(EmbeddingCursorRow.summary_cursor) > 0,
            ),
        )
        stmt = (
            select(SessionRow.id)
            .where(col(SessionRow.id).in_(embedded), visible.condition(col(SessionRow.id)))
            .order_by(col(SessionRow.updated_at).desc(), col(SessionRow.id))
            .limit(max(0, limit))
        )
        return await self.db.read(
            lambda session: [str(s) for s in session.connection().execute(stmt).scalars()]
        )

    async def due_sessions(self, after_id: int) -> tuple[list[str], int]:
        """Sessions that may have something to embed: a message archived after `after_id` past
        their cursor, or a summary newer than their last embedded one. Also returns the
        archive's newest message id, what to pass as `after_id` next time."""

        def work(session: Session) -> tuple[list[str], int]:
            conn = session.connection()
            newest = int(conn.execute(select(func.max(MessageRow.id))).scalar() or 0)
            cursor = (
                select(
                    EmbeddingCursorRow.session_id,
                    func.max(EmbeddingCursorRow.message_cursor).label("mc"),
                    func.max(EmbeddingCursorRow.summary_cursor).label("sc"),
                )
                .group_by(col(EmbeddingCursorRow.session_id))
                .subquery()
            )
            fresh = (
                select(MessageRow.session_id)
                .outerjoin(cursor, cursor.c.session_id == col(MessageRow.session_id))
                .where(
                    col(MessageRow.id) > after_id,
                    col(MessageRow.id) <= newest,
                    col(MessageRow.id) > func.coalesce(cursor.c.mc, 0),
                )
                .distinct()
            )
            summaries = (
                select(SessionSummaryRow.session_id)
                .outerjoin(cursor, cursor.c.session_id == col(SessionSummaryRow.session_id))
                .where(
                    col(SessionSummaryRow.summary) != "",
                    col(SessionSummaryRow.cursor) > func.coalesce(cursor.c.sc, 0),
                )
                .distinct()
            )
            found = {str(s) for s in conn.execute(fresh).scalars()}
            found |= {str(s) for s in conn.execute(summaries).scalars()}
            return sorted(found), newest

        return await self.db.read(work)

    async def cursor(self, session_id: str) -> Cursor | None:
        """How far the session's embeddings reach (None: nothing embedded yet)."""
        return (await self.due(session_id, 0))[0]

    async def due(self, session_id: str, limit: int) -> tuple[Cursor | None, list[Item]]:
        """The session's cursor and what it has to embed next, oldest first: messages after the
        cursor (at most `limit`), then the summary if it is newer than the last embedded one.
        One plain-SQL read: the indexer asks this of every session with new messages."""
        validate_session_id(session_id)

        def work(sql: Lean) -> tuple[Cursor | None, list[Item]]:
            cursor = _read_cursor(sql, session_id)
            after, summary_after = (
                (cursor.message_cursor, cursor.summary_cursor) if cursor else (0, 0)
            )
            rows = sql.all(_PENDING, session_id, after, limit)
            items = [Item(MESSAGE, int(i), str(c)) for i, c in rows]
            summary = sql.one(_NEWEST_SUMMARY, session_id)
            if summary is not None and summary[1] and int(summary[0]) > summary_after:
                items.append(Item(SUMMARY, int(summary[0]), str(summary[1])))
            return cursor, items

        return await self.db.read_lean(work, long=True)

    async def save(
        self,
        session_id: str,
        read: Cursor | None,
        model: str,
        items: list[Item],
        vectors: list[bytes],
        dim: int,
    ) -> bool:
        """Store the vectors of `items` and move the cursor past them, if the cursor is still
        `read` (False otherwise: another writer moved it, and nothing is stored)."""
        ids = {kind: [i.message_id for i in items if i.kind == kind] for kind in (MESSAGE, SUMMARY)}
        message_cursor = max([read.message_cursor if read else 0, *ids[MESSAGE]])
        summary_cursor = max([read.summary_cursor if read else 0, *ids[SUMMARY]])
        pgvector = await self.uses_pgvector()
        values = [
            (session_id, item.kind, item.message_id, model, dim, vector, _text_of(item))
            for item, vector in zip(items, vectors, strict=True)
        ]

        def work(sql: Lean) -> bool:
            if _read_cursor(sql, session_id, lock=True) != read:
                return False
            if pgvector:
                for value in values:
                    stored = sql.one(_INSERT_EMBEDDING + " RETURNING id", *value)
                    if stored is not None:  # None: stored already
                        sql.run(_TO_PGVECTOR, int(stored[0]), vector_literal(value[5]))
            elif values:
                sql.run_many(_INSERT_EMBEDDING, values)
            if read is None:
                epoch = _new_epoch()
                sql.run(_NEW_CURSOR, session_id, model, message_cursor, summary_cursor, epoch)
            else:
                sql.run(_MOVE_CURSOR, message_cursor, summary_cursor, session_id)
            return True

        # Plain SQL (`lean`): the indexer saves a batch for every session with new messages.
        return await self.db.write_lean(work)

    async def reset(self, session_id: str, model: str) -> None:
        """Drop the session's embeddings (every model) and start over with `model`."""
        validate_session_id(session_id)

        def work(session: Session) -> None:
            conn = session.connection()
            for table in (EmbeddingRow, EmbeddingCursorRow):
                conn.execute(delete(table).where(col(table.session_id) == session_id))
            conn.execute(
                insert(EmbeddingCursorRow),
                {"session_id": session_id, "model": model, "epoch": _new_epoch()},
            )

        await self.db.write(work)

    async def message_rows(self, session_id: str, model: str, after_row: int) -> VectorRows:
        """The session's message vectors of `model` stored after row `after_row`, in row order,
        with the epoch they belong to: one read, so the two agree."""

        def work(sql: Lean) -> VectorRows:
            cursor = _read_cursor(sql, session_id)
            if cursor is None:
                return VectorRows("", [], [], [])
            rows = sql.all(_MESSAGE_ROWS, session_id, model, after_row, MESSAGE)
            return VectorRows(
                cursor.epoch,
                [int(r[0]) for r in rows],
                [int(r[1]) for r in rows],
                [bytes(r[2]) for r in rows],
            )

        # Plain SQL (`lean`): recall brings a session's index up to date before every search.
        return await self.db.read_lean(work, long=True)

    async def summary_rows_of(
        self, session_ids: list[str], model: str
    ) -> list[tuple[str, int, str, bytes]]:
        """The embedded summaries of `model` of several sessions in one read:
        (session, cursor, text, vector)."""
        if not session_ids:
            return []
        stmt = select(
            EmbeddingRow.session_id, EmbeddingRow.message_id, EmbeddingRow.text, EmbeddingRow.vector
        ).where(
            col(EmbeddingRow.session_id).in_(session_ids),
            col(EmbeddingRow.model) == model,
            col(EmbeddingRow.kind) == SUMMARY,
        )
        return await self.db.read(
            lambda session: [
                (str(s), int(m), str(t), bytes(v))
                for s, m, t, v in session.connection().execute(stmt).all()
            ]
        )

    async def messages(self, session_id: str, ids: list[int]) -> dict[int, StoredMessage]:
        """The session's archived messages among `ids` (never another session's)."""
        if not ids:
            return {}
        table = MessageRow.__table__.c  # type: ignore[attr-defined]
        stmt = sa_select(
            table.id,
            table.session_id,
            table.role,
            table.content,
            table.sender,
            table.send_at,
            table.task_hash,
        ).where(table.session_id == session_id, table.id.in_(ids))
        rows = await self.db.read(lambda session: session.connection().execute(stmt).all())
        return {int(r[0]): StoredMessage(*r) for r in rows}

    async def session_ids(self) -> list[str]:
        """Every session that has messages (what `agenvoy reindex` goes through)."""
        stmt = select(MessageRow.session_id).distinct()
        return await self.db.read(
            lambda session: sorted(str(s) for s in session.connection().execute(stmt).scalars())
        )
