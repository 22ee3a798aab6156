"""The error memory: a failed tool call, remembered so that the agent hears of it before it
makes the same call again.

A failure is kept per session under `errmem:<sid>:<tool>:<digest of the normalised
arguments>` (see `tool_cache.canonical_args`) for `ttl` seconds: the error text, when it
happened, and the version of what the call read then (`tool_cache.ToolCache.version`).

What happens when the same call comes again within that time:

1. If what the call reads has changed since (a file was written, the archive grew), the old
   failure says nothing about this call: it runs as usual.
2. Otherwise the call is **not run, once**. Its result is an error saying when it failed and
   with what, and that the same call, made again unchanged, will run. The model can correct
   the call, tell the user, or insist.
3. The next identical call runs (the model insisted). If it fails again, the new failure
   replaces the old one and the cycle starts over; a success forgets the failure.

Why refuse once instead of running the call and adding a warning to its result: the tools'
failures are nearly all deterministic (a file that is not there, a name outside the
workspace, a folder where a file is expected), so a repeat fails the same way; for a tool that
asks first (`write_file`, `delete_file`) a repeat would also ask the user to approve
something already known to fail, since the check comes before the confirmation prompt. A model
retrying a failing call in a loop costs the user time and tokens; telling it first costs one
model turn, and only when it repeats itself unchanged. Nothing is ever refused twice in a row,
so a call that was meant to be retried (a transient failure) still runs.

A refusal is a tool result like any other, journaled by the router; the refused call's id is
kept with the failure, so a task replayed after a restart is refused the same call again and
runs the same insisting one. A denied confirmation or an interrupted call is no failure of
the tool and is not remembered. When the KV store fails, calls run as if nothing were
remembered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from gateway.agents.tool_cache import digest
from gateway.clock import Clock
from gateway.logs import get_logger
from gateway.store.kv import ERROR_MEMORY_PREFIX, KVStore

log = get_logger(__name__)

# An error message longer than this is kept shortened: the model needs its gist.
MAX_ERROR_CHARS: Final = 2000


class RepeatedFailure(Exception):
    """A call that failed before, not run again this time; the message says why."""


@dataclass(frozen=True, slots=True)
class Failure:
    error: str
    at_ms: int
    version: str | None  # of what the call read when it failed; None: not known
    refused: str  # the call (`<task>/<call id>`) that was told of it instead of running; ""


class ErrorMemory:
    def __init__(self, kv: KVStore, ttl_seconds: float, clock: Clock) -> None:
        self.kv = kv
        self.ttl = ttl_seconds
        self.clock = clock

    @property
    def enabled(self) -> bool:
        return self.ttl > 0

    async def recall(self, session_id: str, tool: str, args: str) -> Failure | None:
        """The remembered failure of this call, if it is recent enough."""
        try:
            raw = await self.kv.get(_key(session_id, tool, args))
            if raw is None:
                return None
            entry = json.loads(raw)
            failure = Failure(
                str(entry["error"]),
                int(entry["at"]),
                entry.get("version"),
                str(entry.get("refused", "")),
            )
        except Exception:
            log.warning("error memory unreadable", session=session_id, tool=tool, exc_info=True)
            return None
        return failure if self._left(failure) > 0 else None

    @staticmethod
    def refuses(failure: Failure, version: str | None, call: str) -> bool:
        """Whether `call` is told of `failure` instead of running (see the module's doc)."""
        if failure.version != version:
            return False
        return failure.refused in ("", call)

    async def refused(
        self, session_id: str, tool: str, args: str, failure: Failure, call: str
    ) -> None:
        """Note that `call` was told of `failure`: the next identical call runs."""
        if failure.refused == call:
            return
        await self._store(session_id, tool, args, failure, refused=call)

    async def remember(
        self, session_id: str, tool: str, args: str, error: str, version: str | None
    ) -> None:
        failure = Failure(error[:MAX_ERROR_CHARS], self.clock.now_ms(), version, "")
        await self._store(session_id, tool, args, failure, refused="")

    async def forget(self, session_id: str, tool: str, args: str) -> None:
        try:
            await self.kv.delete(_key(session_id, tool, args))
        except Exception:
            log.warning("error memory not cleared", session=session_id, tool=tool, exc_info=True)

    async def clear(self, session_id: str) -> int:
        """Forget every failure of the session; how many there were."""
        removed = 0
        for key in await self.kv.scan(f"{ERROR_MEMORY_PREFIX}{session_id}:"):
            removed += await self.kv.delete(key)
        return removed

    def refusal(self, failure: Failure) -> str:
        """What the model reads instead of the result of the repeated call."""
        return (
            f"not run: this exact call failed {_ago(self.clock.now_ms() - failure.at_ms)} "
            f"with: {failure.error} — and nothing it reads has changed since. Fix the call, or "
            "tell the user; making the same call again unchanged will run it."
        )

    def _left(self, failure: Failure) -> float:
        return self.ttl - (self.clock.now_ms() - failure.at_ms) / 1000

    async def _store(
        self, session_id: str, tool: str, args: str, failure: Failure, *, refused: str
    ) -> None:
        left = self._left(failure)
        if left <= 0:
            return
        entry = {
            "error": failure.error,
            "at": failure.at_ms,
            "version": failure.version,
            "refused": refused,
        }
        try:
            await self.kv.set(
                _key(session_id, tool, args), json.dumps(entry, ensure_ascii=False), ttl=left
            )
        except Exception:
            log.warning("error memory not written", session=session_id, tool=tool, exc_info=True)


def _key(session_id: str, tool: str, args: str) -> str:
    return f"{ERROR_MEMORY_PREFIX}{session_id}:{tool}:{digest(args)}"


def _ago(elapsed_ms: int) -> str:
    seconds = max(0, elapsed_ms // 1000)
    if seconds < 60:
        return "moments ago" if seconds < 5 else f"{seconds} seconds ago"
    minutes = seconds // 60
    if minutes < 120:
        return "1 minute ago" if minutes == 1 else f"{minutes} minutes ago"
    return f"{minutes // 60} hours ago"
