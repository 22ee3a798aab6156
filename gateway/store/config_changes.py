"""The log of live configuration changes (migration 0022): quota overrides, agent bindings, API
tokens, identity links (`link`: the person's identities before and after) and platform
connections (`connection`: the token's reference and whether it is on), each change with
who made it, when, and the value before and after. The repositories that make a change record
it in the same transaction (`record`), so there is no change without its line and no line
without its change; this module reads the log back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import BigInteger, Column, Text, select
from sqlmodel import Field, Session, SQLModel, col

from gateway.store.db import Database

Kind = Literal["quota", "binding", "token", "link", "connection"]
KINDS: tuple[Kind, ...] = ("quota", "binding", "token", "link", "connection")


class ConfigChangeRow(SQLModel, table=True):
    """One change of one subject's configuration."""

    __tablename__ = "config_change"

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(max_length=40)
    subject: str = Field(max_length=250)
    before: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    after: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    changed_by: str = Field(default="", max_length=200)
    changed_at: int = Field(default=0, sa_type=BigInteger)
    reverts: int | None = Field(default=None)  # the change this one rolled back


@dataclass(frozen=True, slots=True)
class ConfigChange:
    id: int
    kind: str
    subject: str
    before: Any  # the JSON value it had (None: it had none)
    after: Any  # the JSON value it got (None: it was removed)
    changed_by: str
    changed_at: int
    reverts: int | None


def _value(text: str) -> Any:
    return json.loads(text) if text else None


def _text(value: Any) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True)


def _change(row: ConfigChangeRow) -> ConfigChange:
    assert row.id is not None
    return ConfigChange(
        row.id,
        row.kind,
        row.subject,
        _value(row.before),
        _value(row.after),
        row.changed_by,
        row.changed_at,
        row.reverts,
    )


def record(
    session: Session,
    kind: Kind,
    subject: str,
    before: Any,
    after: Any,
    *,
    by: str,
    at: int,
    reverts: int | None = None,
) -> None:
    """Write one change inside the caller's transaction; nothing when nothing changed."""
    if before == after:
        return
    session.add(
        ConfigChangeRow(
            kind=kind,
            subject=subject,
            before=_text(before),
            after=_text(after),
            changed_by=by,
            changed_at=at,
            reverts=reverts,
        )
    )


class UnknownChange(LookupError):
    """No change of that number (of that kind)."""


class NotRevertible(ValueError):
    """A change that is not rolled back; the message says why and what to do instead."""


class ConfigChanges:
    """The log, newest first."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def page(
        self,
        *,
        kind: str | None = None,
        subject: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> list[ConfigChange]:
        """Up to `limit` changes older than `before_id` (all when None), newest first."""
        stmt = select(ConfigChangeRow).order_by(col(ConfigChangeRow.id).desc()).limit(limit)
        if kind is not None:
            stmt = stmt.where(col(ConfigChangeRow.kind) == kind)
        if subject is not None:
            stmt = stmt.where(col(ConfigChangeRow.subject) == subject)
        if before_id is not None:
            stmt = stmt.where(col(ConfigChangeRow.id) < before_id)

        def work(session: Session) -> list[ConfigChange]:
            return [_change(row) for row in session.scalars(stmt).all()]

        return await self._db.read(work)

    async def get(self, change_id: int) -> ConfigChange:
        def work(session: Session) -> ConfigChange:
            row = session.get(ConfigChangeRow, change_id)
            if row is None:
                raise UnknownChange(f"no configuration change {change_id}")
            return _change(row)

        return await self._db.read(work)
