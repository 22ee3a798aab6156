"""Work that one instance does for all of them: the Telegram poller, the background jobs.

Whoever holds the work's lease (`gateway.leases`) does it; the others try again every so often
and the first to get the lease once its holder is gone takes the work over. With one instance
(local leases) the work simply runs here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from gateway.clock import Clock
from gateway.leases import Leases
from gateway.logs import get_logger

log = get_logger(__name__)


class Leadership:
    """Runs `start` while this instance holds lease `name`, and `stop` when it loses it or
    the gateway stops."""

    def __init__(
        self,
        leases: Leases,
        name: str,
        clock: Clock,
        *,
        retry_seconds: float,
        start: Callable[[], Awaitable[None]],
        stop: Callable[[], Awaitable[None]],
    ) -> None:
        self.leases = leases
        self.name = name
        self.clock = clock
        self.retry_seconds = retry_seconds
        self._start = start
        self._stop = stop
        self._lost = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self.leading = False
        leases.on_lost(self._on_lost)

    def begin(self) -> None:
        self._loop = asyncio.create_task(self._run(), name=f"leadership {self.name}")

    async def end(self) -> None:
        """Stop the work if it runs here, and let the lease go for another instance."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        await self._step_down()
        with contextlib.suppress(Exception):
            await self.leases.release(self.name)

    async def _run(self) -> None:
        while True:
            if await self._acquire():
                self._lost.clear()
                self.leading = True
                log.info("leading", lease=self.name)
                await self._start()
                await self._lost.wait()
                log.warning("lease lost: stepping down", lease=self.name)
                await self._step_down()
            else:
                await self.clock.sleep(self.retry_seconds)

    async def _acquire(self) -> bool:
        try:
            return await self.leases.acquire(self.name)
        except Exception as exc:  # the lease store is away: try again later
            log.warning("lease not taken", lease=self.name, error=repr(exc))
            return False

    async def _step_down(self) -> None:
        if self.leading:
            self.leading = False
            await self._stop()

    def _on_lost(self, names: frozenset[str]) -> None:
        if self.name in names:
            self._lost.set()


async def if_leading(leases: Leases, name: str, job: Callable[[], Awaitable[object]]) -> None:
    """Run `job` if this instance holds (or can take) lease `name`; the lease is kept, so the
    same instance goes on doing the job until it stops or dies."""
    if await leases.acquire(name):
        await job()
