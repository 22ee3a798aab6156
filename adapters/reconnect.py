"""Connecting a chat platform: tried once at start, then again in the background, with a
growing wait, until the platform answers.

A platform that is down (or a network that is) when the gateway starts must not take the
HTTP API and the other platforms down with it: the adapter's start returns, the platform shows
as down with the reason on `/healthz` and the console, and it connects once it answers. Only an
error no retry can cure (a refused token) stops the trying; at start it is raised, so a wrong
setting still ends `agenvoy run` with a clear message.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential

from gateway.health import Platforms
from gateway.logs import get_logger

log = get_logger(__name__)

FIRST_WAIT_SECONDS: Final = 1.0


def reason_of(exc: BaseException) -> str:
    """What the health page shows: the error's own words, or its type when it has none."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Connection:
    """Connects platform `name` with `connect` (which raises when it could not) and keeps
    trying while `fatal` says an error is one retrying can cure; `connected` runs after a
    connection made in the background (what waited for the platform goes out then)."""

    def __init__(
        self,
        name: str,
        platforms: Platforms,
        connect: Callable[[], Awaitable[None]],
        *,
        fatal: Callable[[BaseException], bool],
        max_wait: float,
        connected: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.name = name
        self._platforms = platforms
        self._connect = connect
        self._fatal = fatal
        self._max_wait = max_wait
        self._connected = connected
        self._retrying: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect now, or go on connecting in the background; raises a fatal error."""
        try:
            await self._connect()
        except Exception as exc:
            if self._fatal(exc):
                self._platforms.down(self.name, reason_of(exc))
                raise
            self._note_failure(exc)
            self._retrying = asyncio.create_task(self._retry(), name=f"connect:{self.name}")
            return
        self._platforms.up(self.name)

    @property
    def retrying(self) -> bool:
        return self._retrying is not None and not self._retrying.done()

    async def stop(self) -> None:
        task, self._retrying = self._retrying, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _note_failure(self, exc: BaseException) -> None:
        self._platforms.down(self.name, reason_of(exc))
        log.warning("platform unreachable, trying again", platform=self.name, error=reason_of(exc))

    async def _retry(self) -> None:
        first = min(FIRST_WAIT_SECONDS, self._max_wait)

        def before_sleep(state: RetryCallState) -> None:
            if state.outcome is not None and (exc := state.outcome.exception()) is not None:
                self._note_failure(exc)

        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda exc: not self._fatal(exc)),
            wait=wait_exponential(multiplier=first, min=first, max=self._max_wait),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            await asyncio.sleep(first)  # tenacity's first attempt does not wait; this one must
            async for attempt in retrying:
                with attempt:
                    await self._connect()
        except Exception as exc:
            # Only a fatal error ends the trying; the gateway goes on without this platform.
            self._platforms.down(self.name, reason_of(exc))
            log.error("platform cannot connect", platform=self.name, error=reason_of(exc))
            return
        self._platforms.up(self.name)
        log.info("platform connected", platform=self.name)
        if self._connected is not None:
            await self._connected()
