"""The typing indicator a message's task earns once it has worked a moment.

A reply that comes within a moment of its message needs no "typing…" before it: that would
be a platform call per message, and the reply would queue behind it on the bot's connection.
So a message's indicator is shown only if its task has not answered `TYPING_AFTER` seconds
after it was taken in; events of a task at work (a tool call, a streamed delta) show it at
once, throttled per channel by the adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

from gateway.clock import Clock
from gateway.events import Origin

# Seconds a task may take to answer before its chat is shown that the bot is typing.
TYPING_AFTER: Final = 1.0


class TypingSoon:
    """Indicators waiting for their task to take longer than `TYPING_AFTER`, by task."""

    def __init__(self, clock: Clock, show: Callable[[Origin], Awaitable[None]]) -> None:
        self._clock = clock
        self._show = show
        self._waiting: dict[str, asyncio.Task[None]] = {}

    def after_a_moment(self, origin: Origin, task_hash: str) -> None:
        """Show the indicator for `task_hash`'s chat unless the task answers first."""
        if task_hash in self._waiting:
            return
        self._waiting[task_hash] = asyncio.create_task(self._later(origin, task_hash))

    async def _later(self, origin: Origin, task_hash: str) -> None:
        try:
            await self._clock.sleep(TYPING_AFTER)
        finally:
            self._waiting.pop(task_hash, None)
        await self._show(origin)

    def answered(self, task_hash: str) -> None:
        """The task showed its chat something (a reply, a prompt, an error): no indicator."""
        waiting = self._waiting.pop(task_hash, None)
        if waiting is not None:
            waiting.cancel()

    async def close(self) -> None:
        """At stop: the indicators still waiting are not shown."""
        waiting = list(self._waiting.values())
        self._waiting.clear()
        for task in waiting:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*waiting, return_exceptions=True)
