"""The engine of one test without a runtime: the router with its commands and schedules, on
a SQLite archive and the embedded (SQLite) KV store in the test's home, alone (`OneInstance`),
with the offline agent and the test's clock. No leases, bus, MCP servers, recall or readiness probe:
the tests on this rig (the `fast` tier) need none of them.

`build_engine` is the one place the parts are put together. A migrated archive is made once
per test worker and copied into each new home: migrating a fresh database is most of what
opening a store costs.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gateway.agents.offline import OfflineAgent
from gateway.agents.summary import RollingSummary
from gateway.agents.tool_memory import ToolMemory
from gateway.auth import Authority
from gateway.clock import Clock
from gateway.cluster.one import OneInstance
from gateway.commands.registry import CommandRegistry
from gateway.core import build_core
from gateway.crash import CrashPoints
from gateway.engine.assembly import Engine as Assembled
from gateway.engine.router import Router
from gateway.presence import Presence
from gateway.schedules import Schedules
from gateway.session_settings import SessionSettings
from gateway.settings import Settings
from gateway.store.kv import SqliteKV
from gateway.store.sessions import SessionStore

ARCHIVE = "history.db"


class Core(Protocol):
    """What a helper shared by runtime tests and engine tests asks of either."""

    @property
    def router(self) -> Router: ...

    @property
    def store(self) -> SessionStore: ...


@dataclass
class Engine:
    settings: Settings
    clock: Clock
    store: SessionStore
    kv: SqliteKV
    presence: Presence
    agent: OfflineAgent
    assembled: Assembled  # the router, the courier and the runner
    router: Router
    authority: Authority
    commands: CommandRegistry
    session_settings: SessionSettings
    schedules: Schedules
    summary: RollingSummary
    tool_memory: ToolMemory

    async def close(self) -> None:
        """Stop in the runtime's order: the router first, so running tasks are interrupted
        with their journals kept, and the stores last."""
        await self.router.close()
        await self.summary.close()
        await self.agent.aclose()
        await self.kv.close()
        await self.store.close()


async def build_engine(settings: Settings, clock: Clock) -> Engine:
    """The engine as `Runtime.start` wires it (`gateway.core.build_core`), for one instance
    on SQLite with the offline agent."""
    crash = CrashPoints(settings.crash_at)
    agent = OfflineAgent(clock)
    async with contextlib.AsyncExitStack() as opened:
        # What opened before a failure is closed: a store left open keeps its writer thread,
        # and with it the test process, alive.
        store = await SessionStore.open(settings, crash=crash)
        opened.push_async_callback(store.close)
        kv = await SqliteKV.open(settings.store_dir / "kv.db", clock=clock)
        opened.push_async_callback(kv.close)
        presence = Presence.of(kv, settings, clock)
        # A reopened home may hold presence keys of its previous life, as after a restart.
        await presence.clear_instance()
        authority = Authority(settings.admin_keys)
        tool_memory = ToolMemory.open(kv, settings, clock)
        summary = RollingSummary(store, agent, settings.history_window)
        core = build_core(
            settings,
            store,
            agent,
            presence,
            OneInstance(),
            authority=authority,
            clock=clock,
            crash=crash,
            tool_memory=tool_memory,
            summary=summary,
        )
        opened.pop_all()
    return Engine(
        settings,
        clock,
        store,
        kv,
        presence,
        agent,
        core.engine,
        core.engine.router,
        authority,
        core.commands,
        core.session_settings,
        core.schedules,
        summary,
        tool_memory,
    )


class MigratedArchive:
    """An archive at the newest migration, made on first use (once per test worker: the
    fixture is session-scoped) and copied into each new home."""

    def __init__(self, folder: Path) -> None:
        self._home = folder
        self._made: Path | None = None

    async def path(self) -> Path:
        if self._made is None:
            settings = Settings(home=self._home, _env_file=None)
            store = await SessionStore.open(settings)
            await store.close()
            made = settings.store_dir / ARCHIVE
            # Closing checkpointed the write-ahead log: the one file is the whole database.
            assert [p.name for p in settings.store_dir.iterdir()] == [ARCHIVE]
            self._made = made
        return self._made

    async def seed(self, settings: Settings) -> None:
        """Give a home that has no archive yet a copy of the migrated one; a home opened
        before (a restart) or another database is left alone."""
        if settings.database_url:
            return
        target = settings.store_dir / ARCHIVE
        if target.exists():
            return
        source = await self.path()
        settings.store_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copyfile(source, target)


class EngineRig:
    """Opens engines for one test: in its home (or another of its folders), on its clock."""

    def __init__(self, home: Path, clock: Clock, archive: MigratedArchive) -> None:
        self.home = home
        self.clock = clock
        self._archive = archive

    @contextlib.asynccontextmanager
    async def open(self, *, home: Path | None = None, **overrides: Any) -> AsyncIterator[Engine]:
        """An engine on `overrides` of the default settings (as `Settings` fields), closed
        when the block ends; open the same home again for what a restart finds."""
        settings = Settings(home=home or self.home, _env_file=None, **overrides)
        await self._archive.seed(settings)
        engine = await build_engine(settings, self.clock)
        try:
            yield engine
        finally:
            await engine.close()
