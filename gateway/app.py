"""Composition root: settings → stores → agent → router → adapters.

`Runtime` is the core without any front-end (tests use it directly); `serve` adds the adapters
and the background jobs and runs until told to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from dataclasses import dataclass
from functools import partial

from gateway.agents.base import Agent
from gateway.agents.offline import OfflineAgent
from gateway.agents.summary import RollingSummary, Summarizes
from gateway.jobs import Reaper, SessionWatcher, every, trim_usage
from gateway.logs import get_logger
from gateway.presence import Presence
from gateway.router import Router
from gateway.settings import Settings
from gateway.store.kv import KVStore, open_kv
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

DAY_SECONDS = 86_400.0


class UnknownAgent(ValueError):
    pass


def build_agent(settings: Settings) -> Agent:
    name = settings.agent
    if name == "offline":
        return OfflineAgent()
    if name == "openai":
        from gateway.agents.openai import OpenAIAgent

        return OpenAIAgent(settings)
    if name == "claude-code":
        from gateway.agents.claude_code import ClaudeCodeAgent, ClaudeCodeUnavailable

        try:
            return ClaudeCodeAgent(settings)
        except ClaudeCodeUnavailable as exc:
            # Shown by `agenvoy run` as a start-up error, like an unknown agent name.
            raise UnknownAgent(str(exc)) from exc
    raise UnknownAgent(
        f"unknown agent {name!r} (AGENVOY_AGENT); available: offline, openai, claude-code"
    )


@dataclass
class Runtime:
    settings: Settings
    store: SessionStore
    kv: KVStore
    presence: Presence
    router: Router
    summary: RollingSummary | None = None

    @classmethod
    async def start(cls, settings: Settings) -> Runtime:
        agent = build_agent(settings)
        store = await SessionStore.open(settings)
        try:
            kv = await open_kv(settings.resolved_kv_url)
        except BaseException:
            await store.close()
            raise
        presence = Presence(
            kv,
            settings.instance_id,
            ttl=settings.presence_ttl_seconds,
            refresh=settings.presence_refresh_seconds,
        )
        cleared = await presence.clear_instance()
        if cleared:
            log.info("cleared presence left by a previous run", keys=cleared)
        router = Router(settings, store, agent, presence)
        summary = None
        if isinstance(agent, Summarizes):
            summary = RollingSummary(store, agent, settings.history_window)
            router.after_task.append(summary.schedule)
        return cls(settings, store, kv, presence, router, summary)

    async def close(self) -> None:
        await self.router.close()
        if self.summary is not None:
            await self.summary.close()
        closer = getattr(self.router.agent, "aclose", None)
        if closer is not None:
            await closer()
        await self.kv.close()
        await self.store.close()


async def serve(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run the gateway until `stop` is set or SIGINT/SIGTERM arrives.

    On shutdown, tasks in flight are interrupted with their journals kept, so the next start
    takes them up again.
    """
    # The composition root is the one place that knows both the core and the adapters.
    from adapters.http import start_http

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)

    runtime = await Runtime.start(settings)
    jobs: list[asyncio.Task[None]] = []
    http = None
    telegram = None
    discord_adapter = None
    try:
        webhooks = []
        if settings.telegram_token is not None and settings.telegram_token.get_secret_value():
            from adapters.telegram import TelegramAdapter

            telegram = TelegramAdapter.build(runtime)
            if telegram.webhook_mode:
                webhooks.append(telegram.webhook_route())
        http = await start_http(runtime, webhooks=webhooks)
        if telegram is not None:
            await telegram.start()
        if settings.discord_token is not None and settings.discord_token.get_secret_value():
            from adapters.discord import DiscordAdapter

            discord_adapter = DiscordAdapter(runtime)
            await discord_adapter.start()
        for address in http.addresses:
            host, port = address[0], address[1]
            log.info(
                "adapter started",
                adapter="http",
                url=f"http://{host}:{port}",
                auth=settings.api_token is not None and bool(settings.api_token.get_secret_value()),
            )
        resumed = await runtime.router.recover()
        sent = await runtime.router.courier.redeliver()
        reaper = Reaper(
            runtime.store, runtime.kv, runtime.presence, runtime.router, settings.temp_idle_seconds
        )
        watcher = SessionWatcher(runtime.store)
        jobs = [
            asyncio.create_task(
                every(settings.cleanup_interval_seconds, reaper.run_once, name="cleanup")
            ),
            asyncio.create_task(
                every(
                    DAY_SECONDS,
                    partial(trim_usage, runtime.store, settings.usage_retention_days),
                    name="usage retention",
                )
            ),
            asyncio.create_task(watcher.run()),
        ]
        log.info("gateway ready", agent=settings.agent, resumed=resumed, redelivered=sent)
        await stop.wait()
        log.info("gateway stopping")
    finally:
        for job in jobs:
            job.cancel()
        for job in jobs:
            with contextlib.suppress(asyncio.CancelledError):
                await job
        if discord_adapter is not None:
            await discord_adapter.stop()
        if telegram is not None:
            await telegram.stop()
        if http is not None:
            await http.cleanup()
        await runtime.close()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)
        log.info("gateway stopped")
