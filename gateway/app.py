"""Composition root: settings → runtime → adapters, and the background jobs.

The one module that knows both the core and the front-ends. Each front-end module exposes
`create(runtime) -> Adapter`; the configured ones are built first (so the routes they
contribute are known), started in order, and stopped in reverse on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog
from pydantic import SecretStr

from gateway import heap
from gateway.adapter import Adapter
from gateway.connections import live
from gateway.home_lock import database_lock, home_lock
from gateway.jobs import Reaper, SessionWatcher, every, trim_usage
from gateway.leadership import if_leading
from gateway.leases import LocalLeases
from gateway.logs import get_logger
from gateway.platforms import PlatformSupervisor
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.slow_stop import SlowStopWatch

log = get_logger(__name__)

DAY_SECONDS = 86_400.0
# How soon `action.log` lines held for want of room are written once there is room again.
HELD_LINES_SECONDS = 10.0
# Stopping takes a second or two. One still under way after the first says where it hangs;
# after the second it is cut short (gateway/slow_stop.py says why that loses nothing).
SLOW_STOP_SECONDS = 10.0
FORCED_STOP_SECONDS = 20.0


def _is_set(secret: SecretStr | None) -> bool:
    return secret is not None and bool(secret.get_secret_value())


@dataclass(frozen=True, slots=True)
class FrontEnd:
    name: str
    module: str  # a module with `create(runtime: Runtime) -> Adapter`
    configured: Callable[[Settings], bool]


# In start order: the HTTP server first, so a platform that registers a webhook finds it up.
# The chat platforms follow their live connections (gateway/platforms.py), all but a webhook
# Telegram, whose route the HTTP server takes at start.
FRONT_ENDS = (
    FrontEnd("http", "adapters.http", lambda settings: True),
    FrontEnd(
        "telegram",
        "adapters.telegram",
        lambda s: _is_set(s.telegram_token) and not live(s, "telegram"),
    ),
)


def build_adapters(runtime: Runtime) -> list[Adapter]:
    """The configured front-ends, built but not started; their routes go to the runtime."""
    adapters: list[Adapter] = []
    for front in FRONT_ENDS:
        if front.configured(runtime.settings):
            # Imported only when configured: a gateway without Discord never loads discord.py.
            module = importlib.import_module(front.module)
            adapters.append(module.create(runtime))
    runtime.http_routes.extend(route for adapter in adapters for route in adapter.routes())
    return adapters


async def serve(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run the gateway until `stop` is set or SIGINT/SIGTERM arrives.

    On shutdown, tasks in flight are interrupted with their journals kept, so the next start
    takes them up again.
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    slow_stop = SlowStopWatch(SLOW_STOP_SECONDS, FORCED_STOP_SECONDS)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(slow_stop.disarm)  # the last step out
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop.set)
                stack.callback(loop.remove_signal_handler, signum)
        stack.callback(log.info, "gateway stopped")
        # Every line this instance logs says which instance it is.
        structlog.contextvars.bind_contextvars(instance=settings.instance_id)
        stack.callback(structlog.contextvars.unbind_contextvars, "instance")
        stack.enter_context(home_lock(settings.home))
        stack.enter_context(database_lock(settings.resolved_database_url))
        runtime = await Runtime.start(settings)
        stack.push_async_callback(runtime.close)
        runtime.router.expect_recovery()
        for adapter in build_adapters(runtime):
            await adapter.start()
            stack.push_async_callback(adapter.stop)
        platforms = PlatformSupervisor(runtime, runtime.connections)
        await platforms.apply()
        stack.push_async_callback(platforms.stop)
        resumed = await runtime.router.recover(at_start=True)
        sent = await runtime.engine.courier.redeliver()
        for job in [*_jobs(runtime), _connection_checks(runtime, platforms)]:
            stack.push_async_callback(_cancel, asyncio.create_task(job))
        heap.settle()
        log.info("gateway ready", agent=settings.agent, resumed=resumed, redelivered=sent)
        await stop.wait()
        log.info("gateway stopping")
        slow_stop.arm()


def _jobs(runtime: Runtime) -> list[Coroutine[Any, Any, None]]:
    """The background jobs. Those that act on every session run on one instance at a time
    (whichever holds the job's lease); the rest on each."""
    settings, leases, router = runtime.settings, runtime.leases, runtime.router
    reaper = Reaper(runtime.store, runtime.kv, runtime.presence, router, settings.temp_idle_seconds)
    trim = partial(trim_usage, runtime.store, settings.usage_retention_days)
    jobs = [
        every(
            settings.cleanup_interval_seconds,
            partial(if_leading, leases, "job:cleanup", reaper.run_once),
            name="cleanup",
            clock=runtime.clock,
        ),
        every(
            DAY_SECONDS,
            partial(if_leading, leases, "job:usage-retention", trim),
            name="usage retention",
            clock=runtime.clock,
        ),
        every(
            settings.schedule_check_seconds,
            partial(if_leading, leases, "job:schedules", runtime.schedules.fire_due),
            name="schedules",
            clock=runtime.clock,
        ),
        SessionWatcher(runtime.store).run(),
        every(
            HELD_LINES_SECONDS,
            runtime.store.write_held_lines,
            name="held audit lines",
            clock=runtime.clock,
            now=False,
        ),
        every(
            heap.GIVE_BACK_SECONDS,
            partial(asyncio.to_thread, heap.give_back),
            name="memory give-back",
            clock=runtime.clock,
            now=False,
        ),
    ]
    bans = runtime.bans
    if bans is not None:  # a ban given elsewhere (another instance, `agenvoy ban`) ends
        # the tasks it reaches here within a second, as it keeps out their next message
        jobs.append(every(bans.fresh_seconds, bans.sweep, name="bans", clock=runtime.clock))
    if runtime.memory is not None:  # every archived message embedded, by one instance
        embed = runtime.memory.indexer.embed_due
        jobs.append(
            every(
                settings.embedding_interval_seconds,
                partial(if_leading, leases, "job:embeddings", embed),
                name="embeddings",
                clock=runtime.clock,
            )
        )
    interval = _recovery_interval(runtime)
    jobs += [
        every(
            interval,
            partial(router.recover, settled_for=interval),
            name="recovery",
            clock=runtime.clock,
            now=False,
        ),
    ]
    if not isinstance(leases, LocalLeases):
        # Replies left pending by an instance that died while sending them (its claim
        # lapsed): sent by whichever instance claims them next.
        jobs.append(
            every(
                _recovery_interval(runtime),
                partial(runtime.engine.courier.redeliver, due_only=True),
                name="redelivery",
                clock=runtime.clock,
                now=False,
            )
        )
    return jobs


async def _connection_checks(runtime: Runtime, platforms: PlatformSupervisor) -> None:
    """A connection changed elsewhere (another instance, `agenvoy connection`) applied here."""
    await every(
        runtime.settings.connection_check_seconds,
        platforms.apply,
        name="platform connections",
        clock=runtime.clock,
        now=False,
    )


def _recovery_interval(runtime: Runtime) -> float:
    """With several instances, a session whose owner died is found at least three times per
    lease TTL: taken over within the TTL and a few seconds."""
    settings = runtime.settings
    if isinstance(runtime.leases, LocalLeases):
        return settings.recovery_interval_seconds
    return min(settings.recovery_interval_seconds, settings.lease_ttl_seconds / 3)


async def _cancel(job: asyncio.Task[None]) -> None:
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await job
