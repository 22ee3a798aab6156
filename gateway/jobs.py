"""Background jobs of a running gateway: reaping idle temp sessions, watching for new ones,
and trimming old usage rows."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from watchfiles import Change, awatch

from gateway.clock import SYSTEM_CLOCK, Clock, now_ms
from gateway.engine.router import Router
from gateway.ids import Prefix, is_permanent, is_valid_session_id
from gateway.logs import get_logger
from gateway.presence import PRESENCE_PREFIX, Presence
from gateway.store.kv import ERROR_MEMORY_PREFIX, TOOL_CACHE_PREFIX, KVStore
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

# The KV key spaces holding per-session keys (`<prefix><session_id>:…`).
SESSION_KEY_PREFIXES: Final = (PRESENCE_PREFIX, TOOL_CACHE_PREFIX, ERROR_MEMORY_PREFIX)


class Reaper:
    """Deletes `temp-*` sessions idle longer than `idle_seconds`: files, SQL rows (every
    per-session table, through `SessionStore.delete`) and keys of `SESSION_KEY_PREFIXES`.

    Never another prefix, and never a session with a task running (here or in another
    process sharing the KV store) or queued.
    """

    def __init__(
        self,
        store: SessionStore,
        kv: KVStore,
        presence: Presence,
        router: Router,
        idle_seconds: float,
    ) -> None:
        self.store = store
        self.kv = kv
        self.presence = presence
        self.router = router
        self.idle_seconds = idle_seconds

    async def run_once(self) -> list[str]:
        cutoff = now_ms() - int(self.idle_seconds * 1000)
        running = {sid for sid, _ in await self.presence.running_tasks()}
        idle = [
            sid
            for sid in await self.store.removal.idle_ids(Prefix.temp.value + "-", cutoff)
            if not is_permanent(sid) and not self.router.is_busy(sid) and sid not in running
        ]
        # A subagent's session stays while the task that started it runs.
        parents = await self.store.removal.parents(idle)
        idle = [
            sid
            for sid in idle
            if sid not in parents
            or not (self.router.is_busy(parents[sid]) or parents[sid] in running)
        ]
        reaped = await self.store.removal.delete_many(idle, unless_active_since=cutoff)
        await self._forget_keys(set(reaped))
        # Directories without a row (a crash between mkdir and insert) are reaped by age too.
        known = await self.store.removal.existing_ids()
        done = set(idle)
        for sid in await asyncio.to_thread(self.store.dirs.list_ids):
            if is_permanent(sid) or sid in done or sid in known or self.router.is_busy(sid):
                continue
            mtime = await asyncio.to_thread(_mtime_ms, self.store.dirs.path_of(sid))
            if mtime is not None and mtime < cutoff:
                await asyncio.to_thread(self.store.dirs.delete, sid)
                reaped.append(sid)
        # Their files go in the background, with what a crash or a stop left in the trash.
        self.store.trash.kick()
        if reaped:
            log.info("reaped idle temp sessions", count=len(reaped), sessions=reaped[:20])
        return reaped

    async def _forget_keys(self, sessions: set[str]) -> None:
        """The reaped sessions' keys: one scan per key space, not one per session."""
        if not sessions:
            return
        for prefix in SESSION_KEY_PREFIXES:
            for key in await self.kv.keys(prefix):
                sid = key[len(prefix) :].partition(":")[0]
                if sid in sessions:
                    await self.kv.delete(key)


def _mtime_ms(path: Path) -> int | None:
    try:
        return int(path.stat().st_mtime * 1000)
    except FileNotFoundError:
        return None


async def every(
    interval: float,
    job: Callable[[], Awaitable[object]],
    *,
    name: str,
    clock: Clock = SYSTEM_CLOCK,
    now: bool = True,
) -> None:
    """Run `job` every `interval` seconds (and once at once); failures are logged, not fatal."""
    first = True
    me = asyncio.current_task()
    while True:
        if not first or now:
            try:
                await job()
            except Exception:
                log.exception("job failed", job=name)
            # A cancellation the job lost (redis-py can, inside its reads' timeouts) still
            # stops the loop: a stop would otherwise wait for it until forced.
            if me is not None and me.cancelling():
                raise asyncio.CancelledError
        first = False
        await clock.sleep(interval)


class SessionWatcher:
    """Logs the id and configured name of every new session directory, whoever created it."""

    def __init__(
        self,
        store: SessionStore,
        on_new: Callable[[str, str], None] | None = None,
    ) -> None:
        self.store = store
        self.on_new = on_new
        self.ready = asyncio.Event()

    async def run(self) -> None:
        root = self.store.dirs.root
        await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)
        stop = asyncio.Event()
        watcher = awatch(
            root,
            stop_event=stop,
            recursive=False,
            debounce=200,
            yield_on_timeout=True,  # an empty first batch tells `ready` the watch is live
            rust_timeout=500,
        )
        try:
            async for changes in watcher:
                self.ready.set()
                for change, path in changes:
                    if change is Change.added:
                        await self._added(Path(path))
        finally:
            stop.set()

    async def _added(self, path: Path) -> None:
        sid = path.name
        if path.parent != self.store.dirs.root or not is_valid_session_id(sid):
            return
        if not await asyncio.to_thread(path.is_dir):
            return
        name = ""
        # The row usually follows the directory by a moment; a missing one is not an error.
        with contextlib.suppress(Exception):
            row = await self.store.get(sid)
            name = row.name if row else ""
        log.info("new session", session=sid, name=name)
        if self.on_new is not None:
            self.on_new(sid, name)


async def trim_usage(store: SessionStore, retention_days: int) -> int:
    deleted = await store.usage.purge(retention_days=retention_days)
    if deleted:
        log.info("usage rows past retention deleted", rows=deleted)
    return deleted
