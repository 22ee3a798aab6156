"""The profiles' and bindings' rows (migration 0021): every profile version, the bindings, and
the one counter that says whether either changed since a task last looked."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, Column, Select, Text, func, select, update
from sqlmodel import Field, Session, SQLModel, col

from gateway.profiles.bindings import Binding
from gateway.store.config_changes import ConfigChangeRow, UnknownChange, record
from gateway.store.db import Database
from gateway.store.lean import Lean


class AgentProfileRow(SQLModel, table=True):
    """One version of a profile."""

    __tablename__ = "agent_profile"

    name: str = Field(primary_key=True, max_length=40)
    version: int = Field(primary_key=True)
    spec: str = Field(sa_column=Column(Text, nullable=False))
    changed_by: str = Field(default="", max_length=200)
    changed_at: int = Field(default=0, sa_type=BigInteger)
    change: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))


class AgentBindingRow(SQLModel, table=True):
    """A place or caller bound to a profile."""

    __tablename__ = "agent_binding"

    kind: str = Field(primary_key=True, max_length=40)
    key: str = Field(primary_key=True, max_length=200)
    profile: str = Field(max_length=40)
    switchable: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    bound_by: str = Field(default="", max_length=200)
    bound_at: int = Field(default=0, sa_type=BigInteger)


class AgentConfigRow(SQLModel, table=True):
    """The counter of changes to profiles and bindings (one row, id 1)."""

    __tablename__ = "agent_config"

    id: int = Field(primary_key=True)
    version: int = Field(default=0, sa_type=BigInteger)


@dataclass(frozen=True, slots=True)
class ProfileVersion:
    name: str
    version: int
    spec: str  # JSON (gateway.profiles.spec.ProfileSpec)
    changed_by: str
    changed_at: int
    change: str


@dataclass(frozen=True, slots=True)
class Stored:
    """Every profile's current version and every binding, as of counter `version`."""

    version: int
    profiles: dict[str, ProfileVersion]
    bindings: dict[tuple[str, str], Binding]


def _version(row: AgentProfileRow) -> ProfileVersion:
    return ProfileVersion(
        row.name, row.version, row.spec, row.changed_by, row.changed_at, row.change
    )


def _binding(row: AgentBindingRow) -> Binding:
    switchable = tuple(n for n in row.switchable.split(",") if n)
    return Binding(row.kind, row.key, row.profile, switchable, row.bound_by, row.bound_at)


def _newest() -> Select[AgentProfileRow]:
    """Each profile's newest version."""
    newest = (
        select(col(AgentProfileRow.name), func.max(col(AgentProfileRow.version)).label("v"))
        .group_by(col(AgentProfileRow.name))
        .subquery()
    )
    return select(AgentProfileRow).join(
        newest,
        (col(AgentProfileRow.name) == newest.c.name) & (col(AgentProfileRow.version) == newest.c.v),
    )


def _bump(session: Session) -> None:
    session.connection().execute(
        update(AgentConfigRow)
        .where(col(AgentConfigRow.id) == 1)
        .values(version=col(AgentConfigRow.version) + 1)
    )


_COUNTER_SQL = "SELECT version FROM agent_config WHERE id = 1"
# The `change` of the version that deletes a profile: it keeps the last fields, so its history
# reads to the end, a rollback brings it back, and a profile made again under its name goes on
# numbering from there.
DELETED = "deleted"


class ProfileStore:
    """The repository of profiles and bindings."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def version(self) -> int:
        """The change counter: one row, read before each task."""

        def work(sql: Lean) -> int:
            return int(sql.value(_COUNTER_SQL) or 0)

        return await self._db.read_lean(work)

    async def stored(self) -> Stored:
        """The counter, each profile's current version and the bindings, in one read."""

        def work(session: Session) -> Stored:
            counter = session.get(AgentConfigRow, 1)
            rows = session.scalars(_newest()).all()
            bound = session.scalars(select(AgentBindingRow)).all()
            return Stored(
                counter.version if counter is not None else 0,
                {row.name: _version(row) for row in rows if row.change != DELETED},
                {(b.kind, b.key): _binding(b) for b in bound},
            )

        return await self._db.read(work)

    async def add_version(
        self, name: str, spec: str, change: str, *, by: str, at: int, after: int | None
    ) -> int:
        """Record a new version of `name`; its number. `after`: the version the change was
        made on (None: a new profile), so that two changes made at once do not both land
        on the same base unnoticed (ProfileConflict)."""

        def work(session: Session) -> int:
            current = session.scalar(
                select(func.max(AgentProfileRow.version)).where(col(AgentProfileRow.name) == name)
            )
            if current != after:
                raise ProfileConflict(name, current)
            version = (current or 0) + 1
            session.add(
                AgentProfileRow(
                    name=name,
                    version=version,
                    spec=spec,
                    changed_by=by,
                    changed_at=at,
                    change=change,
                )
            )
            _bump(session)
            return version

        return await self._db.write(work)

    async def deleted(self) -> list[ProfileVersion]:
        """The deleted profiles, by name: each one's last version, the one that says so."""

        def work(session: Session) -> list[ProfileVersion]:
            stmt = _newest().where(col(AgentProfileRow.change) == DELETED)
            rows = session.scalars(stmt.order_by(col(AgentProfileRow.name))).all()
            return [_version(row) for row in rows]

        return await self._db.read(work)

    async def history(self, name: str) -> list[ProfileVersion]:
        """Every version of `name`, oldest first."""

        def work(session: Session) -> list[ProfileVersion]:
            stmt = (
                select(AgentProfileRow)
                .where(col(AgentProfileRow.name) == name)
                .order_by(col(AgentProfileRow.version))
            )
            return [_version(row) for row in session.scalars(stmt).all()]

        return await self._db.read(work)

    async def bind(self, binding: Binding) -> None:
        """Bind (or bind again) `binding.kind:key`; the change is logged."""

        def work(session: Session) -> None:
            _put(session, binding, by=binding.bound_by, at=binding.bound_at)

        await self._db.write(work)

    async def unbind(self, kind: str, key: str, *, by: str = "", at: int = 0) -> bool:
        """Remove a binding; False when there was none. The change is logged."""

        def work(session: Session) -> bool:
            return _remove(session, kind, key, by=by, at=at)

        return await self._db.write(work)

    async def revert_binding(self, change_id: int, *, by: str, at: int) -> Binding | None:
        """Put back the binding a logged change replaced (bound again, or removed when there
        was none before): a new change, itself logged. What the target has now."""

        def work(session: Session) -> Binding | None:
            logged = session.get(ConfigChangeRow, change_id)
            if logged is None or logged.kind != "binding":
                raise UnknownChange(f"no binding change {change_id}")
            kind, _, key = logged.subject.partition(":")
            if not logged.before:
                _remove(session, kind, key, by=by, at=at, reverts=change_id)
                return None
            was = json.loads(logged.before)
            binding = Binding(kind, key, was["profile"], tuple(was["switchable"]), by, at)
            _put(session, binding, by=by, at=at, reverts=change_id)
            return binding

        return await self._db.write(work)


def _logged(row: AgentBindingRow | None) -> dict[str, Any] | None:
    """What the change log keeps of a binding: where it sends, not who made it."""
    if row is None:
        return None
    return {"profile": row.profile, "switchable": [n for n in row.switchable.split(",") if n]}


def _put(
    session: Session, binding: Binding, *, by: str, at: int, reverts: int | None = None
) -> None:
    row = session.get(AgentBindingRow, (binding.kind, binding.key))
    before = _logged(row)
    if row is None:
        row = AgentBindingRow(kind=binding.kind, key=binding.key, profile="")
    row.profile = binding.profile
    row.switchable = ",".join(binding.switchable)
    row.bound_by = binding.bound_by
    row.bound_at = binding.bound_at
    session.add(row)
    record(session, "binding", binding.target, before, _logged(row), by=by, at=at, reverts=reverts)
    _bump(session)


def _remove(
    session: Session, kind: str, key: str, *, by: str, at: int, reverts: int | None = None
) -> bool:
    row = session.get(AgentBindingRow, (kind, key))
    if row is None:
        return False
    record(session, "binding", f"{kind}:{key}", _logged(row), None, by=by, at=at, reverts=reverts)
    session.delete(row)
    _bump(session)
    return True


class ProfileConflict(RuntimeError):
    """Another change of the profile landed first; the change is not made."""

    def __init__(self, name: str, current: int | None) -> None:
        super().__init__(
            f"profile {name!r} changed meanwhile (now version {current or 0}); try again"
        )
