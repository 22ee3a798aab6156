"""Profiles as the gateway uses them: the built-in `default` (the environment's agent), the
stored ones, their changes (checked, versioned, audited) and bindings, and which profile
answers a task.

What a task resolves against is a snapshot of the archive, kept until the change counter moves:
a task reads one number, and only after a change (on this instance or another) the rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.clock import Clock
from gateway.events import Origin
from gateway.profiles.bindings import Binding, BindingInvalid, parse_target, winner
from gateway.profiles.spec import (
    DEFAULT,
    ProfileInvalid,
    ProfileSpec,
    changed,
    check_name,
    difference,
)
from gateway.settings import Settings
from gateway.store.profiles import DELETED, ProfileStore, ProfileVersion, Stored


class UnknownProfile(LookupError):
    pass


@dataclass(frozen=True, slots=True)
class Resolved:
    """The profile that answers a task, and why: the binding that chose it (None: default)."""

    name: str
    version: int  # 0 for `default`
    spec: ProfileSpec
    binding: Binding | None

    @property
    def why(self) -> str:
        if self.binding is None:
            return "no binding applies here: the gateway's default"
        by = f" (by {self.binding.bound_by})" if self.binding.bound_by else ""
        return f"bound to {self.binding.target}{by}"


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    profiles: dict[str, tuple[int, ProfileSpec]]
    bindings: dict[tuple[str, str], Binding]


def default_spec(settings: Settings) -> ProfileSpec:
    """The `default` profile: today's environment (AGENVOY_AGENT and the provider settings)."""
    claude = settings.agent == "claude"
    return ProfileSpec(
        agent=settings.agent,
        model=settings.anthropic_model if claude else settings.model,
        base_url=settings.anthropic_base_url if claude else settings.openai_base_url,
        reasoning=settings.reasoning,
        history_window=settings.history_window,
    )


class Profiles:
    def __init__(
        self,
        settings: Settings,
        store: ProfileStore,
        clock: Clock,
        mcp_servers: frozenset[str] | None = None,
    ) -> None:
        """`mcp_servers`: the names the MCP config holds (None: not checked)."""
        self.settings = settings
        self.store = store
        self.clock = clock
        self.mcp_servers = mcp_servers
        self.default = default_spec(settings)
        self._snapshot: Snapshot | None = None
        self._loading = asyncio.Lock()
        self._counter_read: asyncio.Future[int] | None = None

    def _read_done(self, reading: asyncio.Future[int]) -> None:
        if self._counter_read is reading:
            self._counter_read = None
        if not reading.cancelled():
            reading.exception()  # retrieved: every waiter has it raised

    # -- reading -------------------------------------------------------------------------

    async def snapshot(self) -> Snapshot:
        """What is stored now: one read of the change counter while nothing changed. Tasks
        that start while a read of it is under way share that read (a change committed a
        moment before may then reach the task after)."""
        reading = self._counter_read
        if reading is None:
            reading = asyncio.ensure_future(self.store.version())
            self._counter_read = reading
            reading.add_done_callback(self._read_done)
        counter = await asyncio.shield(reading)
        held = self._snapshot
        if held is not None and held.version == counter:
            return held
        async with self._loading:  # tasks starting together after a change read the rows once
            held = self._snapshot
            if held is not None and held.version >= counter:
                return held
            stored = await self.store.stored()
            self._snapshot = _snapshot_of(stored)
            return self._snapshot

    async def resolve(self, session_id: str, origin: Origin | None) -> Resolved:
        snap = await self.snapshot()
        binding = winner(snap.bindings, session_id, origin)
        if binding is None or binding.profile == DEFAULT:
            return Resolved(DEFAULT, 0, self.default, binding)
        found = snap.profiles.get(binding.profile)
        if found is None:  # bound before the profile existed: the check at `bind` prevents it
            return Resolved(DEFAULT, 0, self.default, None)
        return Resolved(binding.profile, found[0], found[1], binding)

    async def get(self, name: str) -> tuple[int, ProfileSpec]:
        if name == DEFAULT:
            return 0, self.default
        check_name(name)
        found = (await self.snapshot()).profiles.get(name)
        if found is None:
            raise UnknownProfile(f"no profile {name!r}")
        return found

    async def names(self) -> list[str]:
        return [DEFAULT, *sorted((await self.snapshot()).profiles)]

    async def history(self, name: str) -> list[ProfileVersion]:
        check_name(name)
        versions = await self.store.history(name)
        if not versions:
            raise UnknownProfile(f"no profile {name!r}")
        return versions

    async def deleted(self) -> list[ProfileVersion]:
        """The deleted profiles (their history kept), each with the version that deleted it."""
        return await self.store.deleted()

    async def bindings(self) -> list[Binding]:
        snap = await self.snapshot()
        return sorted(snap.bindings.values(), key=lambda b: (b.kind, b.key))

    # -- changing ------------------------------------------------------------------------

    async def set(self, name: str, changes: Mapping[str, Any], *, by: str) -> ProfileVersion:
        """A new version of `name` (made when new, or deleted) with `changes`;
        ProfileInvalid names the field refused."""
        check_name(name)
        history = await self.store.history(name)
        alive = history and history[-1].change != DELETED
        before = ProfileSpec.from_json(history[-1].spec) if alive else None
        after = changed(before or ProfileSpec(), changes)
        await self._check_references(name, after)
        return await self._record(name, before, after, history, by=by)

    async def rollback(self, name: str, version: int, *, by: str) -> ProfileVersion:
        """A new version of `name` holding the fields of its `version`."""
        history = await self.history(name)
        old = next((v for v in history if v.version == version), None)
        if old is not None and old.change == DELETED:
            old = None  # what it held is the version before it
        if old is None:
            raise ProfileInvalid("version", f"{name} has versions 1 to {history[-1].version}")
        before = ProfileSpec.from_json(history[-1].spec)
        after = ProfileSpec.from_json(old.spec)
        await self._check_references(name, after)
        return await self._record(
            name, before, after, history, by=by, note=f"rollback to version {version}: "
        )

    async def delete(self, name: str, *, by: str) -> ProfileVersion:
        """Delete `name` (a version that says so; its history stays). Refused while a binding
        or another profile's fallbacks name it: those would answer with something else
        unannounced."""
        if name == DEFAULT:
            raise ProfileInvalid("name", "the default profile is the environment's: it stays")
        await self.get(name)  # UnknownProfile
        users = [b.target for b in await self.bindings() if name in (b.profile, *b.switchable)]
        if users:
            raise ProfileInvalid("name", f"{name} is bound at {', '.join(users)}: unbind first")
        snap = await self.snapshot()
        leaning = sorted(n for n, (_, spec) in snap.profiles.items() if name in spec.fallbacks)
        if leaning:
            said = ", ".join(leaning)
            raise ProfileInvalid("name", f"{name} is a fallback of {said}: change those first")
        history = await self.store.history(name)
        last = history[-1]
        number = await self.store.add_version(
            name, last.spec, DELETED, by=by, at=self.clock.now_ms(), after=last.version
        )
        self._counter_read = None
        return ProfileVersion(name, number, last.spec, by, self.clock.now_ms(), DELETED)

    async def _record(
        self,
        name: str,
        before: ProfileSpec | None,
        after: ProfileSpec,
        history: list[ProfileVersion],
        *,
        by: str,
        note: str = "",
    ) -> ProfileVersion:
        change = note + difference(before, after)
        at = self.clock.now_ms()
        base = history[-1].version if history else None
        number = await self.store.add_version(
            name, after.to_json(), change, by=by, at=at, after=base
        )
        self._counter_read = None  # a read begun before this change must not answer after it
        return ProfileVersion(name, number, after.to_json(), by, at, change)

    async def _check_references(self, name: str, spec: ProfileSpec) -> None:
        known = set(await self.names())
        for fallback in spec.fallbacks:
            if fallback == name:
                raise ProfileInvalid("fallbacks", "a profile cannot fall back to itself")
            if fallback not in known:
                raise ProfileInvalid("fallbacks", f"no profile {fallback!r}")
        if self.mcp_servers is not None:
            for server in spec.mcp_servers:
                if server not in self.mcp_servers:
                    listed = ", ".join(sorted(self.mcp_servers)) or "none configured"
                    raise ProfileInvalid("mcp_servers", f"no MCP server {server!r} ({listed})")

    async def bind(
        self, target: str, profile: str, *, by: str, switchable: tuple[str, ...] = ()
    ) -> Binding:
        kind, key = parse_target(target)
        known = set(await self.names())
        for name in (profile, *switchable):
            if name not in known:
                raise BindingInvalid(f"profile: no profile {name!r}")
        binding = Binding(kind, key, profile, switchable, by, self.clock.now_ms())
        await self.store.bind(binding)
        self._counter_read = None
        return binding

    async def unbind(self, target: str, *, by: str = "") -> bool:
        kind, key = parse_target(target)
        gone = await self.store.unbind(kind, key, by=by, at=self.clock.now_ms())
        self._counter_read = None
        return gone

    def changed(self) -> None:
        """Something else changed the rows here (gateway/config_log.py): the next task reads
        the counter again rather than share a read begun before."""
        self._counter_read = None

    async def choose(
        self, session_id: str, profile: str, under: Binding | None, *, by: str
    ) -> Binding:
        """`/agent use`: a binding of the session itself, chosen under `under` (the binding
        that applied); it keeps that binding's switchable set, and its profile, so that the
        chat's admins can switch again."""
        switchable: tuple[str, ...] = ()
        if under is not None:
            switchable = tuple(dict.fromkeys((*under.switchable, under.profile)))
        return await self.bind(f"session:{session_id}", profile, by=by, switchable=switchable)


def _snapshot_of(stored: Stored) -> Snapshot:
    profiles = {
        name: (row.version, ProfileSpec.from_json(row.spec))
        for name, row in stored.profiles.items()
    }
    return Snapshot(stored.version, profiles, dict(stored.bindings))
