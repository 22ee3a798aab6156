"""Which tasks are running right now, visible to every instance sharing one KV store.

While a task runs, its instance holds the key `action:<session_id>:<task_hash>` with a
short TTL and refreshes it in the background. A clean exit deletes the key; a crashed
instance stops refreshing, so its keys expire by themselves after the TTL. At start-up an
instance calls `clear_instance` to drop keys a previous life of it left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
from collections.abc import AsyncIterator
from typing import Final

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.ids import is_valid_session_id, validate_hash, validate_session_id
from gateway.logs import get_logger
from gateway.settings import Settings
from gateway.store.kv import KVStore

__all__ = ["PRESENCE_PREFIX", "Presence", "presence_key"]

PRESENCE_PREFIX: Final = "action:"

_log = get_logger("gateway.presence")


def presence_key(session_id: str, task_hash: str) -> str:
    """`action:<session_id>:<task_hash>`, after validating both parts."""
    validate_session_id(session_id)
    validate_hash(task_hash)
    return f"{PRESENCE_PREFIX}{session_id}:{task_hash}"


def _parse_key(key: str) -> tuple[str, str] | None:
    if not key.startswith(PRESENCE_PREFIX):
        return None
    session_id, sep, task_hash = key[len(PRESENCE_PREFIX) :].partition(":")
    if not sep or not is_valid_session_id(session_id):
        return None
    try:
        validate_hash(task_hash)
    except ValueError:
        return None
    return session_id, task_hash


class Presence:
    """Running-task presence for one instance (`instance_id`) on a shared `KVStore`.

    Keys live `ttl` seconds and are refreshed every `refresh` seconds while held, so
    `refresh` must be shorter than `ttl`. With a `grace`, a key is written only once the
    block has lasted that long: a task that ends sooner costs no KV write at all.
    """

    def __init__(
        self,
        kv: KVStore,
        instance_id: str,
        ttl: float = 60.0,
        refresh: float = 55.0,
        clock: Clock = SYSTEM_CLOCK,
        grace: float = 0.0,
    ) -> None:
        if not instance_id:
            raise ValueError("instance_id must not be empty")
        for name, value in (("ttl", ttl), ("refresh", refresh)):
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"presence {name} must be a positive number, got {value!r}")
        if refresh >= ttl:
            raise ValueError(
                f"presence refresh ({refresh}s) must be shorter than its ttl ({ttl}s), "
                "or keys would lapse between refreshes"
            )
        self.kv = kv
        self.instance_id = instance_id
        self.ttl = ttl
        self.refresh = refresh
        self.clock = clock
        self.grace = grace
        self._held: set[str] = set()

    @classmethod
    def of(cls, kv: KVStore, settings: Settings, clock: Clock = SYSTEM_CLOCK) -> Presence:
        """This instance's presence, timed as the settings say."""
        return cls(
            kv,
            settings.instance_id,
            ttl=settings.presence_ttl_seconds,
            refresh=settings.presence_refresh_seconds,
            grace=settings.presence_grace_seconds,
            clock=clock,
        )

    @contextlib.asynccontextmanager
    async def hold(self, session_id: str, task_hash: str) -> AsyncIterator[None]:
        """Mark the task running for the duration of the `async with` block."""
        key = presence_key(session_id, task_hash)
        value = json.dumps(
            {
                "instance": self.instance_id,
                "started_at": self.clock.now_ms(),
                "pid": os.getpid(),
            },
            separators=(",", ":"),
        )
        # Set as the keeper is canceled: a KV client can lose the cancellation (redis-py, inside
        # its read's timeout), and the keeper must stop all the same.
        done = asyncio.Event()
        if self.grace > 0:
            keeper = asyncio.create_task(self._mark_later(key, value, done), name=f"presence:{key}")
        else:
            self._held.add(key)
            await self._mark(key, value)
            keeper = asyncio.create_task(
                self._keep_alive(key, value, done), name=f"presence-refresh:{key}"
            )
        try:
            yield
        finally:
            done.set()
            keeper.cancel()
            try:
                # Wait for the keeper to stop so it cannot re-create the key after the delete.
                await asyncio.wait({keeper})
            finally:
                if key in self._held:
                    self._held.discard(key)
                    await self._release(key)

    async def _mark_later(self, key: str, value: str, done: asyncio.Event) -> None:
        # The loop's own time, not the gateway's clock: the grace saves writes and nobody
        # waits on it, and a test clock that holds time still must not hide running tasks.
        await asyncio.sleep(self.grace)
        if done.is_set():
            return
        # Held before the write, so that a cancel in the middle of it still deletes the key.
        self._held.add(key)
        await self._mark(key, value)
        await self._keep_alive(key, value, done)

    async def _mark(self, key: str, value: str) -> None:
        try:
            await self.kv.set(key, value, self.ttl)
        except Exception as exc:
            # The KV store is out of reach (a Redis cut): the task runs all the same, unseen by
            # presence until the next refresh puts the key back.
            _log.warning("presence_not_written", key=key, error=repr(exc))
        else:
            _log.debug("presence_held", key=key)

    async def _keep_alive(self, key: str, value: str, done: asyncio.Event) -> None:
        while not done.is_set():
            await self.clock.sleep(self.refresh)
            if done.is_set():
                return
            try:
                if not await self.kv.expire(key, self.ttl):
                    # Lapsed (a long stall, or someone removed it): put it back.
                    _log.warning("presence_key_lapsed", key=key)
                    await self.kv.set(key, value, self.ttl)
            except Exception as exc:
                _log.warning("presence_refresh_failed", key=key, error=repr(exc))

    async def _release(self, key: str) -> None:
        try:
            await self.kv.delete(key)
        except Exception as exc:
            # The key still expires on its own after the ttl.
            _log.warning("presence_release_failed", key=key, error=repr(exc))
        else:
            _log.debug("presence_released", key=key)

    async def is_running(self, session_id: str) -> bool:
        """Whether any instance is running a task of `session_id`."""
        return bool(await self.running_tasks(session_id))

    async def running_tasks(self, session_id: str | None = None) -> list[tuple[str, str]]:
        """`(session_id, task_hash)` of every running task, or only those of `session_id`."""
        prefix = PRESENCE_PREFIX
        if session_id is not None:
            prefix += validate_session_id(session_id) + ":"
        found = []
        for key in await self.kv.keys(prefix):
            parsed = _parse_key(key)
            if parsed is not None:
                found.append(parsed)
        return sorted(found)

    async def clear_instance(self) -> int:
        """Delete the presence keys of this instance id; returns how many were deleted.

        Meant for start-up, to drop what a previous life of this instance left behind. Keys
        this object holds right now, and keys of other instances, are left alone.
        """
        removed = 0
        for key, raw in (await self.kv.scan(PRESENCE_PREFIX)).items():
            if key in self._held or _parse_key(key) is None:
                continue
            try:
                owner = json.loads(raw).get("instance")
            except (ValueError, AttributeError):
                continue
            if owner == self.instance_id and await self.kv.delete(key):
                removed += 1
        if removed:
            _log.info("presence_cleared", instance=self.instance_id, keys=removed)
        return removed
