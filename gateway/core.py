"""The engine with what is built around it: the gateway's commands (built-in and schedule
commands), the session settings they change, and the schedules. `Runtime.start` builds it on
the stores, agent and cluster it opened; the engine tests build it the same way without a
runtime, so both run one wiring.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.agents.base import Agent
from gateway.agents.summary import RollingSummary
from gateway.agents.tool_memory import ToolMemory
from gateway.auth import Authority
from gateway.bans import Bans
from gateway.clock import Clock
from gateway.commands.agents import AgentCommands
from gateway.commands.bans import BanCommands
from gateway.commands.builtin import BuiltinCommands
from gateway.commands.links import LinkCommands
from gateway.commands.memories import MemoryCommands
from gateway.commands.registry import CommandRegistry
from gateway.commands.schedules import ScheduleCommands
from gateway.commands.usage import UsageCommands
from gateway.crash import CrashPoints
from gateway.engine.assembly import Engine, assemble
from gateway.engine.cluster import Cluster
from gateway.knowledge.service import Knowledge
from gateway.linking import Linking
from gateway.member_data.commands import MemberCommands
from gateway.member_data.service import MemberData, canceler
from gateway.memory.recall import Recall
from gateway.presence import Presence
from gateway.prices import PriceTable
from gateway.profiles.agents import AgentPool, Alone, Build, Chain
from gateway.profiles.service import Profiles
from gateway.schedules import SCHEDULE_PLATFORM, Schedules
from gateway.session_settings import SessionSettings
from gateway.settings import Settings
from gateway.store.bans import BanList
from gateway.store.profiles import ProfileStore
from gateway.store.sessions import SessionStore


@dataclass(frozen=True, slots=True)
class Core:
    engine: Engine
    commands: CommandRegistry
    session_settings: SessionSettings
    schedules: Schedules
    linking: Linking
    bans: Bans
    profiles: Profiles
    agents: AgentPool  # the profiles' agents; the caller closes it before the default agent


def build_core(
    settings: Settings,
    store: SessionStore,
    agent: Agent,
    presence: Presence,
    cluster: Cluster,
    *,
    authority: Authority,
    clock: Clock,
    crash: CrashPoints,
    tool_memory: ToolMemory,
    summary: RollingSummary | None = None,
    recall: Recall | None = None,
    knowledge: Knowledge | None = None,
    prices: PriceTable | None = None,
    build_agent: Build | None = None,
    chain: Chain | None = None,
    alone: Alone | None = None,
    mcp_servers: frozenset[str] | None = None,
) -> Core:
    """`build_agent`: makes a profile's agent (None: only the `default` profile answers);
    `chain`: joins a profile's agent and its fallbacks'; `alone`: what a task runs of an agent
    with no fallbacks (the default agent's included); `mcp_servers`: the configured MCP
    servers' names, that profiles may name."""
    # The registry is filled once the router exists (the built-in commands act on it); the
    # router only ever calls `run`.
    commands = CommandRegistry(authority, first_delivery=store.first_delivery)
    bans = Bans(BanList(store.db), store, authority, clock)
    profiles = Profiles(settings, ProfileStore(store.db), clock, mcp_servers)
    agents = AgentPool(profiles, agent, build_agent, chain, alone)
    engine = assemble(
        settings,
        store,
        agent,
        presence,
        cluster,
        authority=authority,
        clock=clock,
        crash=crash,
        tool_memory=tool_memory,
        commands=commands.run,
        is_command=commands.takes,
        screen=bans.screen,
        recall=recall,
        knowledge=knowledge,
        after_task=[summary.schedule] if summary is not None else [],
        prices=prices,
        agents=agents,
    )
    # A ban ends what the banned member started, and their answers to prompts.
    bans.enforce_on(engine.router)
    engine.router.screen_answers(bans.screen_answer)
    session_settings = SessionSettings(
        store,
        authority,
        max_persona_chars=settings.max_message_chars,
        known_tools=agent.tool_names,
        tool_prefixes=agent.tool_prefixes,
    )
    builtin = BuiltinCommands(
        commands, engine.router, store, session_settings, agent.name, clock, tool_memory
    )
    builtin.register()
    forget_tools = builtin.forget_tool_memory if tool_memory is not None else None
    MemoryCommands(commands, store.member_memories, authority, clock, forget_tools).register()
    schedules = Schedules(
        store,
        engine.router,
        authority,
        clock,
        default_timezone=settings.schedule_timezone,
        max_chars=settings.max_message_chars,
        check_seconds=settings.schedule_check_seconds,
        crash=crash,
        max_per_identity=settings.max_schedules_per_identity,
        min_interval_seconds=settings.min_schedule_interval_seconds,
    )
    # Scheduled tasks of sessions no chat holds are read like any task of their session.
    engine.router.register_pulled(SCHEDULE_PLATFORM)
    ScheduleCommands(commands, schedules).register()
    MemberCommands(commands, MemberData(store, canceler(engine.router), tool_memory)).register()
    UsageCommands(commands, engine.admission, authority).register()
    linking = Linking(store.ownership, clock)
    LinkCommands(commands, linking).register()
    BanCommands(commands, bans, store.ownership).register()
    AgentCommands(commands, profiles, authority, store.ownership).register()
    return Core(engine, commands, session_settings, schedules, linking, bans, profiles, agents)
