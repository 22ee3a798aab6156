"""The running core without any front-end: stores, agent, router, commands, settings, and
whether it is ready to serve.

Adapters receive a `Runtime`; tests start one directly. `close` stops it in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from dataclasses import dataclass, field

from sqlalchemy.engine import make_url

from gateway.adapter import HttpRoute
from gateway.agents.base import Agent
from gateway.agents.counted import MODEL_AGENTS, Counted, alone_policy
from gateway.agents.fallback import FallbackChain
from gateway.agents.model_stats import ModelStats
from gateway.agents.retries import ALONE, RetryPolicy
from gateway.agents.summary import RollingSummary, Summarizes
from gateway.agents.tool_memory import ToolMemory
from gateway.agents.tools import ToolSource
from gateway.auth import Authority
from gateway.bans import Bans
from gateway.bus import Bus, open_bus
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.cluster.one import OneInstance
from gateway.cluster.several import SeveralInstances
from gateway.commands.registry import CommandRegistry
from gateway.connections import Connections
from gateway.core import build_core
from gateway.crash import CrashPoints
from gateway.engine.assembly import Engine
from gateway.engine.cluster import Cluster
from gateway.engine.router import Router
from gateway.health import CheckState, Platforms, Readiness, ReadinessProbe, answers
from gateway.leases import Leases, LocalLeases, open_leases
from gateway.linking import Linking
from gateway.logs import get_logger
from gateway.mcp_tools.config import McpConfig, load_config
from gateway.memory.setup import Memory
from gateway.presence import Presence
from gateway.prices import load_prices
from gateway.profiles.agents import AgentPool, Alone, Built, Chain
from gateway.profiles.building import Make, builder
from gateway.profiles.service import Profiles
from gateway.schedules import Schedules
from gateway.session_settings import SessionSettings
from gateway.settings import Settings
from gateway.store.connections import ConnectionStore
from gateway.store.kv import KVStore, open_kv
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

AGENTS = ("offline", "openai", "claude", "claude-code")


class UnknownAgent(ValueError):
    pass


def build_agent(
    settings: Settings,
    clock: Clock = SYSTEM_CLOCK,
    found: ToolSource | None = None,
    mcp: McpConfig | None = None,
    stats: ModelStats | None = None,
) -> Agent:
    """`found`: the MCP servers' tools for the agents that run tools themselves; `mcp`: the
    servers, for the claude-code agent to hand its CLI; `stats`: where a lone agent's failed
    attempts are counted. With `AGENVOY_FALLBACK`, the agent and its fallbacks as one chain
    (gateway/agents/chains.py), counted in the chain's own `stats`."""
    from gateway.agents.chains import default_chain, label_of

    if not settings.fallback:
        label = label_of(settings)
        retry = ALONE if stats is None else alone_policy(settings.agent, stats, label)
        return one_agent(settings, clock, found, mcp, retry)

    def make(target: Settings, retry: RetryPolicy) -> Agent:
        return one_agent(target, clock, found, mcp, retry)

    try:
        return default_chain(settings, clock, make)
    except ValueError as exc:  # a bad AGENVOY_FALLBACK item, a key variable not set
        raise UnknownAgent(str(exc)) from exc


def one_agent(
    settings: Settings,
    clock: Clock = SYSTEM_CLOCK,
    found: ToolSource | None = None,
    mcp: McpConfig | None = None,
    retry: RetryPolicy = ALONE,
) -> Agent:
    """The agent `settings.agent` names; `retry`: how its model calls are retried."""
    name = settings.agent
    if name == "offline":
        from gateway.agents.offline import OfflineAgent

        return OfflineAgent(clock)
    if name == "openai":
        from gateway.agents.openai import OpenAIAgent

        return OpenAIAgent(settings, clock, found=found, retry=retry)
    if name == "claude":
        from gateway.agents.anthropic import AnthropicAgent

        return AnthropicAgent(settings, clock, found=found, retry=retry)
    if name == "claude-code":
        from gateway.agents.claude_code import ClaudeCodeAgent, ClaudeCodeUnavailable

        try:
            return ClaudeCodeAgent(settings, clock=clock, mcp=mcp)
        except ClaudeCodeUnavailable as exc:
            # Shown by `agenvoy run` as a start-up error, like an unknown agent name.
            raise UnknownAgent(str(exc)) from exc
    raise UnknownAgent(f"unknown agent {name!r} (AGENVOY_AGENT); available: {', '.join(AGENTS)}")


def mcp_tools(settings: Settings, config: McpConfig) -> ToolSource | None:
    """The configured MCP servers' tools for the openai and claude agents (None without
    servers: the SDK is imported only when there are some)."""
    if not config or settings.agent not in ("openai", "claude"):
        return None
    from gateway.mcp_tools.pool import McpTools

    return McpTools(
        config,
        call_timeout=settings.mcp_call_timeout_seconds,
        start_timeout=settings.mcp_start_timeout_seconds,
    )


def _maker(clock: Clock, stats: ModelStats) -> Make:
    """Builds a profile's agent, with the MCP servers' tools it alone holds."""

    def make(settings: Settings, config: McpConfig, chained: bool) -> Built:
        from gateway.agents.chains import chain_policy, label_of

        label = label_of(settings)
        tools = mcp_tools(settings, config)
        kind = settings.agent
        retry = chain_policy(stats, label) if chained else alone_policy(kind, stats, label)
        agent = one_agent(settings, clock, tools, config, retry)
        return Built(agent, [tools.aclose] if tools is not None else [], label)

    return make


def _chainer(settings: Settings, clock: Clock, stats: ModelStats) -> Chain:
    """Joins a profile's agent and its fallbacks' into one chain, their breakers in `stats`
    (shared with the default agent's chain, so /metrics shows every target)."""

    def chain(primary: Built, fallbacks: list[Built]) -> Agent:
        from gateway.agents.chains import label_of
        from gateway.agents.fallback import build_chain

        members = [primary, *fallbacks]
        return build_chain(
            primary.agent,
            [built.agent for built in fallbacks],
            labels=[built.label or label_of(settings) for built in members],
            clock=clock,
            stats=stats,
            breaker_failures=settings.breaker_failures,
            breaker_cooldown=settings.breaker_cooldown_seconds,
        )

    return chain


def _aloner(settings: Settings, stats: ModelStats) -> Alone:
    """Counts the model calls of an agent that answers with no fallbacks in `stats`, beside
    the chains' targets; it gets no breaker, and retries and fails as it did."""

    def alone(built: Built) -> Agent:
        from gateway.agents.chains import label_of

        agent = built.agent
        if isinstance(agent, FallbackChain) or agent.name not in MODEL_AGENTS:
            return agent  # a chain counts its own; the others call no provider's API
        return Counted(agent, built.label or label_of(settings), stats)

    return alone


def bus_namespace(database_url: str) -> str:
    """What names the signal channels of the instances sharing this archive: its database's
    name (the same however each instance spells the server's address)."""
    name = make_url(database_url).database or ""
    return hashlib.sha256(name.encode()).hexdigest()[:12]


@dataclass
class Runtime:
    settings: Settings
    store: SessionStore
    kv: KVStore
    presence: Presence
    agent: Agent
    engine: Engine
    authority: Authority
    commands: CommandRegistry
    session_settings: SessionSettings
    clock: Clock
    crash: CrashPoints
    leases: Leases
    bus: Bus
    tool_memory: ToolMemory
    schedules: Schedules
    summary: RollingSummary | None = None
    # The MCP servers' tools the agent has; stopped after the agent.
    mcp: ToolSource | None = None
    memory: Memory | None = None  # semantic recall: the embedding job and the search
    # Routes front-ends contribute to the gateway's HTTP server (a platform's webhook).
    http_routes: list[HttpRoute] = field(default_factory=list)
    # Link codes: one for every front-end, so that wrong codes are counted together.
    linking: Linking | None = None
    # Who is kept out of which chat: the chat front-ends say who their platform's admins are.
    bans: Bans | None = None
    # Agent profiles and the agents built for them (closed before the default agent).
    profiles: Profiles | None = None
    agents: AgentPool | None = None
    # What each model target did (calls, tokens, failures, switches, breakers), for /metrics.
    model_stats: ModelStats | None = None
    router: Router = field(init=False)  # the engine's face, which front-ends talk to
    probe: ReadinessProbe = field(init=False)
    platforms: Platforms = field(init=False)  # the chat platforms, connected or not
    # Which bot token each platform should connect with now (changed live).
    connections: Connections = field(init=False)
    _closed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.router = self.engine.router
        self.probe = ReadinessProbe(self._archive_state, answers(self.kv.ping), self.leases.healthy)
        self.platforms = Platforms(self.clock.now_ms)
        self.connections = Connections(ConnectionStore(self.store.db), self.settings, self.clock)

    async def _archive_state(self) -> bool | CheckState:
        """The archive answers, and has room for writes (or is full)."""
        await self.store.ping()
        return "ok" if await self.store.has_room() else "full"

    async def readiness(self) -> Readiness:
        """Whether this instance can serve now; answered within the check timeout."""
        return await self.probe.check()

    @classmethod
    async def start(cls, settings: Settings, *, clock: Clock = SYSTEM_CLOCK) -> Runtime:
        mcp_config = await asyncio.to_thread(load_config, settings)
        # Checked before anything opens: a bad entry stops the start, naming it.
        prices = await asyncio.to_thread(load_prices, settings.prices) if settings.prices else None
        mcp = mcp_tools(settings, mcp_config)
        # The model targets' counts and breakers, for the default agent's chain and the
        # profiles' alike; a lone agent's counts, without a breaker.
        lone = ModelStats()
        agent = build_agent(settings, clock, mcp, mcp_config, lone)
        crash = CrashPoints(settings.crash_at)
        async with contextlib.AsyncExitStack() as opened:
            # What opened before a failure is closed again: an open store's writer thread, for
            # one, would keep the process alive after the error.
            opened.push_async_callback(agent.aclose)
            if mcp is not None:
                opened.push_async_callback(mcp.aclose)
            store = await SessionStore.open(settings, crash=crash)
            opened.push_async_callback(store.close)
            kv = await open_kv(settings.resolved_kv_url, clock=clock)
            opened.push_async_callback(kv.close)
            presence = Presence.of(kv, settings, clock)
            cleared = await presence.clear_instance()
            if cleared:
                log.info("cleared presence left by a previous run", keys=cleared)
            leases = await open_leases(
                settings.resolved_database_url,
                settings.instance_id,
                settings.lease_ttl_seconds,
                clock,
            )
            opened.push_async_callback(leases.close)
            bus = open_bus(settings.resolved_kv_url, bus_namespace(settings.resolved_database_url))
            authority = Authority(settings.admin_keys)
            tool_memory = ToolMemory.open(kv, settings, clock)
            summary = None
            if isinstance(agent, Summarizes):
                summary = RollingSummary(store, agent, settings.history_window)
            memory = Memory.open(settings, store.vectors, store.knowledge, clock)
            cluster: Cluster = (
                OneInstance()
                if isinstance(leases, LocalLeases)
                else SeveralInstances(leases, bus, settings.instance_id, settings.lease_ttl_seconds)
            )
            model_stats = agent.stats if isinstance(agent, FallbackChain) else lone
            core = build_core(
                settings,
                store,
                agent,
                presence,
                cluster,
                authority=authority,
                clock=clock,
                crash=crash,
                tool_memory=tool_memory,
                summary=summary,
                recall=memory.recall,
                knowledge=memory.knowledge,
                prices=prices,
                build_agent=builder(settings, mcp_config, _maker(clock, model_stats)),
                chain=_chainer(settings, clock, model_stats),
                alone=_aloner(settings, model_stats),
                mcp_servers=frozenset(server.name for server in mcp_config.servers),
            )
            opened.push_async_callback(core.agents.aclose)
            # Instances on one Redis count messages a minute together, per archive.
            shared = kv.shared_window(f"{bus_namespace(settings.resolved_database_url)}:")
            if shared is not None:
                core.engine.admission.window = shared
            await bus.start()
            opened.pop_all()
        return cls(
            settings,
            store,
            kv,
            presence,
            agent,
            core.engine,
            authority,
            core.commands,
            core.session_settings,
            clock,
            crash,
            leases,
            bus,
            tool_memory,
            core.schedules,
            summary,
            mcp,
            memory,
            linking=core.linking,
            bans=core.bans,
            profiles=core.profiles,
            agents=core.agents,
            model_stats=model_stats,
        )

    async def close(self) -> None:
        """Stop everything, in reverse order; closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        await self.probe.close()
        await self.router.close()  # lets the sessions' leases go and says so on the bus
        await self.engine.courier.close()  # what waits to be sent again stays in the outbox
        await self.leases.close()
        await self.bus.close()
        if self.summary is not None:
            await self.summary.close()
        if self.memory is not None:
            await self.memory.close()
        if self.agents is not None:
            await self.agents.aclose()
        await self.agent.aclose()
        if self.mcp is not None:
            await self.mcp.aclose()  # ends the stdio servers' processes
        await self.kv.close()
        await self.store.close()
