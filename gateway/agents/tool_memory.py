"""A session's memory of its tool calls: the tool cache and the error memory, made from the
settings once per runtime and handed to every task's context (`tools.call_tool` uses them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gateway.agents.error_memory import ErrorMemory
from gateway.agents.tool_cache import ToolCache
from gateway.clock import Clock
from gateway.settings import Settings
from gateway.store.kv import KVStore


@dataclass(frozen=True, slots=True)
class ToolMemory:
    cache: ToolCache
    errors: ErrorMemory

    @classmethod
    def open(cls, kv: KVStore, settings: Settings, clock: Clock) -> ToolMemory:
        return cls(
            ToolCache(kv, settings.tool_cache_seconds, clock),
            ErrorMemory(kv, settings.error_memory_seconds, clock),
        )

    async def forget(self, session_id: str) -> tuple[int, int]:
        """Clear the session's error memory and tool cache (`/forget`); how many failures
        and cache keys went."""
        return await self.errors.clear(session_id), await self.cache.clear(session_id)

    async def forget_for_erasure(self, session_ids: Iterable[str]) -> int:
        """Forget the sessions' tool calls (their results and errors may quote a member's
        words), then leave no copy in the store's files; how many entries went."""
        gone = 0
        for session_id in session_ids:
            gone += sum(await self.forget(session_id))
        await self.cache.kv.scrub()
        return gone
