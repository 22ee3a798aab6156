"""The rows of platform connections (migration 0026): where each platform's bot token is, and
whether it is on. Every change is logged with who, when, before and after (`config_change`,
kind `connection`), in the change's own transaction."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger
from sqlmodel import Field, Session, SQLModel, select

from gateway.store.config_changes import record
from gateway.store.db import Database


class ConnectionRow(SQLModel, table=True):
    __tablename__ = "platform_connection"

    platform: str = Field(primary_key=True, max_length=20)
    token: str = Field(max_length=140)  # env:NAME or file:NAME
    enabled: bool
    changed_by: str = Field(default="", max_length=200)
    changed_at: int = Field(default=0, sa_type=BigInteger)


@dataclass(frozen=True, slots=True)
class Connection:
    platform: str
    token: str  # the reference, never a token
    enabled: bool
    changed_by: str
    changed_at: int


def _connection(row: ConnectionRow) -> Connection:
    return Connection(row.platform, row.token, row.enabled, row.changed_by, row.changed_at)


def _logged(row: ConnectionRow | None) -> dict[str, Any] | None:
    return None if row is None else {"token": row.token, "enabled": row.enabled}


class ConnectionStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def all(self) -> dict[str, Connection]:
        """Every configured connection, by platform: one small read."""

        def work(session: Session) -> dict[str, Connection]:
            return {r.platform: _connection(r) for r in session.exec(select(ConnectionRow))}

        return await self._db.read(work)

    async def put(
        self, platform: str, token: str, enabled: bool, *, by: str, at: int
    ) -> Connection:
        def work(session: Session) -> Connection:
            row = session.get(ConnectionRow, platform)
            before = _logged(row)
            if row is None:
                row = ConnectionRow(platform=platform, token=token, enabled=enabled)
            row.token, row.enabled, row.changed_by, row.changed_at = token, enabled, by, at
            session.add(row)
            record(session, "connection", platform, before, _logged(row), by=by, at=at)
            return _connection(row)

        return await self._db.write(work)

    async def remove(self, platform: str, *, by: str, at: int) -> bool:
        """Forget the platform's row: its token comes from the environment again."""

        def work(session: Session) -> bool:
            row = session.get(ConnectionRow, platform)
            if row is None:
                return False
            record(session, "connection", platform, _logged(row), None, by=by, at=at)
            session.delete(row)
            return True

        return await self._db.write(work)

    async def revert(self, change_id: int, *, by: str, at: int) -> Connection | None:
        """Roll back logged change `change_id`: the connection it replaced (None: there was
        none, the environment's again)."""
        from gateway.store.config_changes import ConfigChangeRow, UnknownChange

        def work(session: Session) -> Connection | None:
            change = session.get(ConfigChangeRow, change_id)
            if change is None or change.kind != "connection":
                raise UnknownChange(f"no connection change {change_id}")
            platform = change.subject
            row = session.get(ConnectionRow, platform)
            now = _logged(row)
            was = json.loads(change.before) if change.before else None
            if was is None:
                if row is not None:
                    session.delete(row)
                kept = None
            else:
                if row is None:
                    row = ConnectionRow(platform=platform, token="", enabled=False)
                row.token, row.enabled = str(was["token"]), bool(was["enabled"])
                row.changed_by, row.changed_at = by, at
                session.add(row)
                kept = _connection(row)
            after = None if kept is None else {"token": kept.token, "enabled": kept.enabled}
            record(session, "connection", platform, now, after, by=by, at=at, reverts=change_id)
            return kept

        return await self._db.write(work)
