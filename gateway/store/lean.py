"""The per-message statements as plain SQL, run on the driver's own cursor.

Through SQLAlchemy a small statement costs ~80 µs of Python (execution context, result
processing, events) and an ORM read several hundred; the driver itself runs the same prepared
statement in a few µs. On the path every message takes (the context read before a task, the
message archived, the run recorded) that difference was most of the gateway's CPU, so those
statements are written here once, with `?` placeholders, and run on the DBAPI connection under
the caller's transaction: `sqlite3` on SQLite; on PostgreSQL an asyncpg connection
(`gateway.store.pg_lean`), which takes `$1, $2, …` (rewritten once per statement). Everything
else keeps the ORM.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

Row = tuple[Any, ...]

_QMARK = re.compile(r"\?")


@functools.lru_cache(maxsize=1024)  # the lean statements are a fixed set; bounded anyway
def in_dialect(dialect: str, sql: str) -> str:
    if dialect != "postgresql":
        return sql
    counter = iter(range(1, sql.count("?") + 1))
    return _QMARK.sub(lambda _: f"${next(counter)}", sql)


class Lean:
    """One DBAPI cursor, inside whatever transaction its connection is in."""

    __slots__ = ("_cursor", "dialect")

    def __init__(self, dbapi_connection: Any, dialect: str) -> None:
        self._cursor = dbapi_connection.cursor()
        self.dialect = dialect

    def one(self, sql: str, *params: Any) -> Row | None:
        self._cursor.execute(in_dialect(self.dialect, sql), params)
        row = self._cursor.fetchone()
        return tuple(row) if row is not None else None

    def all(self, sql: str, *params: Any) -> list[Row]:
        self._cursor.execute(in_dialect(self.dialect, sql), params)
        return [tuple(row) for row in self._cursor.fetchall()]

    def value(self, sql: str, *params: Any) -> Any:
        """The first column of the first row, None when there is no row."""
        row = self.one(sql, *params)
        return row[0] if row is not None else None

    def run(self, sql: str, *params: Any) -> int:
        """Run a statement without rows; how many rows it changed."""
        self._cursor.execute(in_dialect(self.dialect, sql), params)
        return int(self._cursor.rowcount)

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run a statement without rows once for each of `rows` (its parameters)."""
        self._cursor.executemany(in_dialect(self.dialect, sql), rows)
