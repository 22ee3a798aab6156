"""The rows of what members asked the bot to remember (migration 0024).

Each row belongs to the identity that asked; a member's memories are those of every identity
linked to theirs, so what they told the bot on Telegram is known when they write on Discord.
Taken in by /remember or by the agent's `remember` tool once the member agreed; listed by
/memories, removed by /forget ID (their own only), exported and erased with the member's data.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, delete, func, select
from sqlmodel import Field, Session, SQLModel, col

from gateway.memory.remembered import MAX_MEMORIES, MemberMemory, clean_memory_text
from gateway.store.db import Database
from gateway.store.lean import Lean
from gateway.store.ownership import linked_in
from gateway.store.session_facts import linked_lean


class MemberMemoryRow(SQLModel, table=True):
    __tablename__ = "member_memory"

    id: int | None = Field(default=None, primary_key=True)
    identity: str = Field(max_length=200, index=True)
    text: str
    created_at: int = Field(sa_type=BigInteger)
    asked_in: str = Field(default="", max_length=200)
    via: str = Field(default="command", max_length=16)


_MEMORIES_SQL = (
    "SELECT id, identity, text, created_at, asked_in, via FROM member_memory"
    " WHERE identity IN ({marks}) ORDER BY id"
)


class TooManyMemories(ValueError):
    def __init__(self) -> None:
        super().__init__(
            f"you have {MAX_MEMORIES} memories, the most kept: /memories lists them, "
            "/forget ID removes one"
        )


def _memory(row: MemberMemoryRow) -> MemberMemory:
    assert row.id is not None
    return MemberMemory(row.id, row.identity, row.text, row.created_at, row.asked_in, row.via)


def _of(session: Session, identities: list[str]) -> list[MemberMemoryRow]:
    stmt = (
        select(MemberMemoryRow)
        .where(col(MemberMemoryRow.identity).in_(identities))
        .order_by(col(MemberMemoryRow.id))
    )
    return list(session.scalars(stmt).all())


def export_memories(session: Session, identities: list[str]) -> list[dict[str, Any]]:
    """For the member's export (inside its read)."""
    return [row.model_dump() for row in _of(session, identities)]


def erase_memories(session: Session, identities: list[str]) -> int:
    """For the member's erasure (inside its write)."""
    stmt = delete(MemberMemoryRow).where(col(MemberMemoryRow.identity).in_(identities))
    return int(session.connection().execute(stmt).rowcount)


class MemberMemories:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def of_member(self, identity: str) -> list[MemberMemory]:
        """The memories of the member of `identity` (all their linked identities), oldest
        first: one read, made before every task, in plain SQL (through the ORM it was most of
        the reader threads' work on a busy chat platform)."""

        def work(sql: Lean) -> list[MemberMemory]:
            identities = sorted(linked_lean(sql, identity))
            marks = ", ".join("?" * len(identities))
            rows = sql.all(_MEMORIES_SQL.format(marks=marks), *identities)
            return [MemberMemory(int(r[0]), r[1], r[2], int(r[3]), r[4], r[5]) for r in rows]

        return await self._db.read_lean(work)

    async def add(
        self, identity: str, text: str, *, session_id: str, via: str, at: int
    ) -> tuple[MemberMemory, bool]:
        """Keep `text` for the member of `identity`; the memory and whether it is new (the
        same words kept already for any of their identities are not kept twice). ValueError
        for an empty or over-long text, TooManyMemories past the limit."""
        cleaned = clean_memory_text(text)

        def work(session: Session) -> tuple[MemberMemory, bool]:
            rows = _of(session, sorted(linked_in(session, identity)))
            for row in rows:
                if row.text == cleaned:
                    return _memory(row), False
            if len(rows) >= MAX_MEMORIES:
                raise TooManyMemories()
            row = MemberMemoryRow(
                identity=identity, text=cleaned, created_at=at, asked_in=session_id, via=via
            )
            session.add(row)
            session.flush()
            return _memory(row), True

        return await self._db.write(work)

    async def remove(self, identity: str, memory_id: int) -> bool:
        """Remove one memory, only if it is the member's (any of their identities); False
        when it is not theirs or gone: nobody learns whether another's of that number exists."""

        def work(session: Session) -> bool:
            stmt = delete(MemberMemoryRow).where(
                col(MemberMemoryRow.id) == memory_id,
                col(MemberMemoryRow.identity).in_(sorted(linked_in(session, identity))),
            )
            return int(session.connection().execute(stmt).rowcount) > 0

        return await self._db.write(work)

    async def count(self) -> int:
        def work(session: Session) -> int:
            return int(session.scalar(select(func.count()).select_from(MemberMemoryRow)) or 0)

        return await self._db.read(work)
