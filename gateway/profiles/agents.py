"""The agents of the profiles: built once per profile version, shared by the tasks that use
it, and closed when a newer version replaces it (once its last task has ended) or when the
gateway stops.

The `default` profile's agent is the one the gateway starts with; a task that no binding
sends elsewhere takes it without anything being built.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from gateway.agents.base import Agent, AgentContext, AgentFailed
from gateway.agents.model_stats import TargetLabel
from gateway.events import Origin
from gateway.logs import get_logger
from gateway.profiles.service import Profiles, Resolved, UnknownProfile
from gateway.profiles.spec import DEFAULT, ProfileSpec

log = get_logger(__name__)


@dataclass
class Built:
    """An agent made for a profile version, and what else must be closed with it (the MCP
    servers' tools it alone uses)."""

    agent: Agent
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    label: TargetLabel | None = None  # its model target, as /metrics and action.log name it

    async def aclose(self) -> None:
        await self.agent.aclose()
        for close in self.closers:
            await close()


# Makes the agent of a profile's version (reads its key; may fail with a message that names
# what is missing, never a key).
Build = Callable[[str, ProfileSpec], Awaitable[Built]]
# A profile's agent and its fallback profiles' agents → the agent a task runs (the composition
# root's `gateway.agents.fallback.build_chain`). None: fallbacks are not used.
Chain = Callable[[Built, list[Built]], Agent]
# A profile's agent that answers with no fallbacks → the agent a task runs (the composition
# root's: its model calls counted for /metrics, nothing else changed). None: as it is.
Alone = Callable[[Built], Agent]


@dataclass
class _Entry:
    version: int
    built: Built
    users: int = 0
    retired: bool = False


@dataclass(frozen=True, slots=True)
class Chosen:
    """The agent a task runs, and the profile that chose it (None: no profiles here)."""

    agent: Agent
    profile: Resolved | None

    @property
    def budgets(self) -> Mapping[str, int]:
        """The profile's budgets per member (none for `default`: the settings' hold)."""
        if self.profile is None or self.profile.name == DEFAULT:
            return {}
        return self.profile.spec.budgets

    @property
    def profile_name(self) -> str:
        return self.profile.name if self.profile is not None else DEFAULT

    def window(self, fallback: int) -> int:
        """How many recent messages the agent sees."""
        spec = self.profile.spec if self.profile is not None else None
        return spec.history_window or fallback if spec is not None else fallback

    def apply(self, context: AgentContext) -> None:
        """The profile's persona, reasoning level and allowed tools, where the session's own
        settings (`/persona`, `/reasoning`, `/allow`) say nothing else."""
        if self.profile is None or self.profile.name == DEFAULT:
            return
        spec = self.profile.spec
        context.persona = context.persona or spec.persona
        context.reasoning = context.reasoning or spec.reasoning
        context.allowed_tools = context.allowed_tools | frozenset(spec.allowed_tools)


class AgentPool:
    def __init__(
        self,
        profiles: Profiles,
        default: Agent,
        build: Build | None = None,
        chain: Chain | None = None,
        alone: Alone | None = None,
    ) -> None:
        self.profiles = profiles
        self.default = default  # as a fallback, bare: the chain counts its calls itself
        self._build = build
        self._chain = chain
        self._alone: Alone = alone or (lambda built: built.agent)
        self._default_alone = self._alone(Built(default))
        self._entries: dict[str, _Entry] = {}
        self._building: dict[tuple[str, int], asyncio.Future[Built]] = {}
        self._closed = False
        self._closing: set[asyncio.Task[None]] = set()  # closes under way, kept alive

    @contextlib.asynccontextmanager
    async def lease(self, session_id: str, origin: Origin | None) -> AsyncIterator[Chosen]:
        """The agent of the profile that answers a task here, held until the task ends."""
        resolved = await self.profiles.resolve(session_id, origin)
        if resolved.name == DEFAULT:
            yield Chosen(self._default_alone, resolved)
            return
        async with contextlib.AsyncExitStack() as held:
            primary = await held.enter_async_context(self._held(resolved))
            if not resolved.spec.fallbacks or self._chain is None:
                yield Chosen(self._alone(primary), resolved)
                return
            fallbacks = [await self._fallback(name, held) for name in resolved.spec.fallbacks]
            usable = [built for built in fallbacks if built is not None]
            yield Chosen(self._chain(primary, usable), resolved)

    @contextlib.asynccontextmanager
    async def _held(self, resolved: Resolved) -> AsyncIterator[Built]:
        """A profile version's agent, built at its first use, kept while a task holds it."""
        entry = await self._entry(resolved)
        entry.users += 1
        try:
            yield entry.built
        finally:
            entry.users -= 1
            if entry.retired and entry.users == 0:
                await entry.built.aclose()

    async def _fallback(self, name: str, held: contextlib.AsyncExitStack) -> Built | None:
        """A fallback profile's agent, at its current version (its own fallbacks are not
        followed: a chain is one profile's list). One that cannot be built is left out of the
        chain: the task still has the profiles before and after it."""
        if name == DEFAULT:
            return Built(self.default)
        try:
            version, spec = await self.profiles.get(name)
            return await held.enter_async_context(self._held(Resolved(name, version, spec, None)))
        except (AgentFailed, UnknownProfile) as exc:
            log.warning("a fallback profile is left out", profile=name, error=str(exc))
            return None

    async def _entry(self, resolved: Resolved) -> _Entry:
        name, version = resolved.name, resolved.version
        entry = self._entries.get(name)
        if entry is not None and entry.version == version:
            return entry
        key = (name, version)
        pending = self._building.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._building[key] = pending
            try:
                pending.set_result(await self._make(name, resolved.spec))
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved here: the waiters below re-raise it
                raise
            finally:
                del self._building[key]
            self._replace(name, _Entry(version, pending.result()))
        else:
            await asyncio.shield(pending)
        return self._entries[name]

    async def _make(self, name: str, spec: ProfileSpec) -> Built:
        if self._build is None:
            raise AgentFailed(f"profile {name!r}: this gateway builds no agents for profiles")
        try:
            built = await self._build(name, spec)
        except AgentFailed:
            raise
        except Exception as exc:
            log.warning("a profile's agent could not be built", profile=name, error=str(exc))
            raise AgentFailed(f"profile {name!r}: {exc}") from exc
        log.info("profile agent built", profile=name, agent=built.agent.name)
        return built

    def _replace(self, name: str, entry: _Entry) -> None:
        old = self._entries.get(name)
        if old is not None and old.version > entry.version:
            # Built for an older version while a newer one was built: keep the newer one.
            entry.retired = True
            self._retire_later(entry)
            return
        self._entries[name] = entry
        if old is not None:
            old.retired = True
            if old.users == 0:
                self._retire_later(old)

    def _retire_later(self, entry: _Entry) -> None:
        if entry.users == 0:
            task = asyncio.get_running_loop().create_task(entry.built.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every profile agent (the default one is the runtime's to close)."""
        if self._closed:
            return
        self._closed = True
        entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            with contextlib.suppress(Exception):
                await entry.built.aclose()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
