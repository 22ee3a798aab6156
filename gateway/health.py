"""Whether this instance can serve: its SQL archive answers, its KV store answers, and the
connection its leases live on is healthy. `/healthz` reports it, for load balancers and
orchestrators to take an instance out of rotation."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Literal

from gateway.logs import get_logger

log = get_logger(__name__)

# How long a readiness check waits for each part: a load balancer's probe must get its answer
# in seconds, even from an instance whose database stopped answering.
CHECK_TIMEOUT_SECONDS: Final = 2.0

# "full": the archive answers, but writes fail for lack of space (gateway.store.space).
CheckState = Literal["ok", "unreachable", "timeout", "full"]
Check = Callable[[], Coroutine[Any, Any, "bool | CheckState"]]


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
        self._running: dict[str, asyncio.Task[bool | CheckState]] = {}
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
            result = task.result()
            state = result if isinstance(result, str) else "ok" if result else "unreachable"
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


def _retrieve(task: asyncio.Task[bool | CheckState]) -> None:
    # A check that failed after its probe gave up on it is read here, so asyncio does not report
    # its exception as never retrieved.
    if not task.cancelled():
        task.exception()


def answers(ping: Callable[[], Awaitable[None]]) -> Check:
    """A check from a ping that raises unless its part answers."""

    async def check() -> bool:
        await ping()
        return True

    return check


@dataclass(frozen=True, slots=True)
class PlatformState:
    """A chat platform as this instance last found it: `connected`, or not with the reason
    (the error of the last attempt) and when it was seen."""

    connected: bool
    reason: str
    since_ms: int


class Platforms:
    """Whether each chat platform this instance serves is connected. A platform that cannot
    be reached does not keep the instance from serving (the HTTP API, the other platforms):
    it shows here, on `/healthz` and on the console's health page, until it answers."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._states: dict[str, PlatformState] = {}

    def up(self, name: str) -> None:
        self._states[name] = PlatformState(True, "", self._now_ms())

    def down(self, name: str, reason: str) -> None:
        since = self._states.get(name)
        kept = since.since_ms if since is not None and not since.connected else self._now_ms()
        self._states[name] = PlatformState(False, reason, kept)

    def forget(self, name: str) -> None:
        """The platform is no longer served here (its connection was turned off)."""
        self._states.pop(name, None)

    def states(self) -> dict[str, PlatformState]:
        return dict(sorted(self._states.items()))
