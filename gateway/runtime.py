"""The running core without any front-end: stores, agent, router, commands, settings, and
whether it is ready to serve.

Adapters receive a `Runtime`; tests start one directly. `close` stops it in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sqlalchemy.engine import make_url

from gateway.adapter import HttpRoute
from gateway.agents.base import Agent
from gateway.agents.summary import RollingSummary, Summarizes
from gateway.auth import Authority
from gateway.bus import Bus, open_bus
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.commands.builtin import BuiltinCommands
from gateway.commands.registry import CommandRegistry
from gateway.crash import CrashPoints
from gateway.engine.router import Router
from gateway.leases import Leases, open_leases
from gateway.logs import get_logger
from gateway.presence import Presence
from gateway.session_settings import SessionSettings
from gateway.settings import Settings
from gateway.store.kv import KVStore, open_kv
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

AGENTS = ("offline", "openai", "claude-code")

# How long a readiness check waits for each part: a load balancer's probe must get its answer
# in seconds, even from an instance whose database stopped answering.
CHECK_TIMEOUT_SECONDS: Final = 2.0

CheckState = Literal["ok", "unreachable", "timeout"]
Check = Callable[[], Coroutine[Any, Any, bool]]


class UnknownAgent(ValueError):
    pass


def build_agent(settings: Settings, clock: Clock = SYSTEM_CLOCK) -> Agent:
    name = settings.agent
    if name == "offline":
        from gateway.agents.offline import OfflineAgent

        return OfflineAgent(clock)
    if name == "openai":
        from gateway.agents.openai import OpenAIAgent

        return OpenAIAgent(settings, clock)
    if name == "claude-code":
        from gateway.agents.claude_code import ClaudeCodeAgent, ClaudeCodeUnavailable

        try:
            return ClaudeCodeAgent(settings, clock=clock)
        except ClaudeCodeUnavailable as exc:
            # Shown by `agenvoy run` as a start-up error, like an unknown agent name.
            raise UnknownAgent(str(exc)) from exc
    raise UnknownAgent(f"unknown agent {name!r} (AGENVOY_AGENT); available: {', '.join(AGENTS)}")


def bus_namespace(database_url: str) -> str:
    """What names the signal channels of the instances sharing this archive: its database's
    name (the same however each instance spells the server's address)."""
    name = make_url(database_url).database or ""
    return hashlib.sha256(name.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Readiness:
    """What an instance needs to serve, each part as it answered: the SQL archive (a trivial
    query), the KV store, and the connection its leases live on."""

    database: CheckState
    kv: CheckState
    leases: CheckState

    @property
    def ready(self) -> bool:
        return self.database == self.kv == self.leases == "ok"


class ReadinessProbe:
    """Runs the checks side by side, each given `timeout` seconds.

    A check still running at its timeout is left to finish rather than cancelled: cancelling a
    query halfway can spoil the connection it runs on (for the leases, the loss of every session
    this instance holds). The next probe waits on that same check instead of piling another
    query onto a part that is not answering.
    """

    def __init__(
        self, database: Check, kv: Check, leases: Check, *, timeout: float = CHECK_TIMEOUT_SECONDS
    ) -> None:
        self._checks = {"database": database, "kv": kv, "leases": leases}
        self._timeout = timeout
        self._running: dict[str, asyncio.Task[bool]] = {}
        self._last: dict[str, CheckState] = {}

    async def check(self) -> Readiness:
        names = list(self._checks)
        states = await asyncio.gather(*(self._state(name) for name in names))
        return Readiness(**dict(zip(names, states, strict=True)))

    async def _state(self, name: str) -> CheckState:
        task = self._running.get(name)
        if task is None or task.done():
            task = asyncio.create_task(self._checks[name](), name=f"readiness:{name}")
            task.add_done_callback(_retrieve)
            self._running[name] = task
        done, _ = await asyncio.wait({task}, timeout=self._timeout)
        state: CheckState
        error = ""
        if not done:
            state = "timeout"
        elif task.cancelled():
            state = "unreachable"
        elif (exc := task.exception()) is not None:
            state, error = "unreachable", repr(exc)
        else:
            state = "ok" if task.result() else "unreachable"
        self._note(name, state, error)
        return state

    def _note(self, name: str, state: CheckState, error: str) -> None:
        """Log a change, not every probe: load balancers ask every few seconds."""
        if self._last.get(name, "ok") != state:
            if state == "ok":
                log.info("readiness check passes again", check=name)
            else:
                detail = {"error": error} if error else {}
                log.warning("readiness check failed", check=name, state=state, **detail)
        self._last[name] = state

    async def close(self) -> None:
        running = [task for task in self._running.values() if not task.done()]
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._running.clear()


def _retrieve(task: asyncio.Task[bool]) -> None:
    # A check that failed after its probe gave up on it is read here, so asyncio does not report
    # its exception as never retrieved.
    if not task.cancelled():
        task.exception()


@dataclass
class Runtime:
    settings: Settings
    store: SessionStore
    kv: KVStore
    presence: Presence
    agent: Agent
    router: Router
    authority: Authority
    commands: CommandRegistry
    session_settings: SessionSettings
    clock: Clock
    crash: CrashPoints
    leases: Leases
    bus: Bus
    summary: RollingSummary | None = None
    # Routes front-ends contribute to the gateway's HTTP server (a platform's webhook).
    http_routes: list[HttpRoute] = field(default_factory=list)
    probe: ReadinessProbe = field(init=False)

    def __post_init__(self) -> None:
        self.probe = ReadinessProbe(
            _answers(self.store.db.ping), _answers(self.kv.ping), self.leases.healthy
        )

    async def readiness(self) -> Readiness:
        """Whether this instance can serve now; answered within the check timeout."""
        return await self.probe.check()

    @classmethod
    async def start(cls, settings: Settings, *, clock: Clock = SYSTEM_CLOCK) -> Runtime:
        agent = build_agent(settings, clock)
        store = await SessionStore.open(settings)
        try:
            kv = await open_kv(settings.resolved_kv_url, clock=clock)
        except BaseException:
            await store.close()
            raise
        presence = Presence(
            kv,
            settings.instance_id,
            ttl=settings.presence_ttl_seconds,
            refresh=settings.presence_refresh_seconds,
            clock=clock,
        )
        cleared = await presence.clear_instance()
        if cleared:
            log.info("cleared presence left by a previous run", keys=cleared)
        try:
            leases = await open_leases(
                settings.resolved_database_url,
                settings.instance_id,
                settings.lease_ttl_seconds,
                clock,
            )
        except BaseException:
            await kv.close()
            await store.close()
            raise
        bus = open_bus(settings.resolved_kv_url, bus_namespace(settings.resolved_database_url))
        authority = Authority(settings.admin_keys)
        crash = CrashPoints(settings.crash_at)
        router = Router(
            settings,
            store,
            agent,
            presence,
            authority=authority,
            clock=clock,
            crash=crash,
            leases=leases,
            bus=bus,
        )
        session_settings = SessionSettings(
            store,
            authority,
            max_persona_chars=settings.max_message_chars,
            known_tools=getattr(agent, "tool_names", None),
        )
        commands = CommandRegistry(authority)
        BuiltinCommands(commands, router, store, session_settings, agent.name, clock).register()
        router.commands = commands.run
        await bus.start()
        summary = None
        if isinstance(agent, Summarizes):
            summary = RollingSummary(store, agent, settings.history_window)
            router.after_task.append(summary.schedule)
        return cls(
            settings,
            store,
            kv,
            presence,
            agent,
            router,
            authority,
            commands,
            session_settings,
            clock,
            crash,
            leases,
            bus,
            summary,
        )

    async def close(self) -> None:
        await self.probe.close()
        await self.router.close()  # lets the sessions' leases go and says so on the bus
        await self.leases.close()
        await self.bus.close()
        if self.summary is not None:
            await self.summary.close()
        closer = getattr(self.agent, "aclose", None)
        if closer is not None:
            await closer()
        await self.kv.close()
        await self.store.close()


def _answers(ping: Callable[[], Awaitable[None]]) -> Check:
    """A check from a ping that raises unless its part answers."""

    async def check() -> bool:
        await ping()
        return True

    return check
