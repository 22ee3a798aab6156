"""What the core asks of a front-end: the protocol every adapter implements.

An adapter turns platform events into `Inbound` values for the router, and shows the router's
events on its platform through a `Sink`. The composition root builds the configured adapters
with the running core, starts them in order and stops them in reverse.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.events import Event, Origin


@dataclass
class Progress:
    """How far earlier attempts got with a message the platform takes in several parts (a
    reply split at its size limit). Kept with the outbox entry, so it survives a restart:
    a retried delivery goes on from part `sent` instead of posting the first parts again.
    For a prompt, also where it was asked before (`earlier`)."""

    sent: int = 0
    # Parts handed to the platform so far. One more than `sent` after a crash means the part
    # at `sent` went out with no word back: the platform may have it already.
    attempted: int = 0
    save: Callable[[int, int], Awaitable[None]] | None = None
    # The platform's ids of the messages an earlier life sent this entry's prompt as (asked
    # again after a restart, with a new expiry): the sink takes their buttons away, so one
    # asking of a question stays open, and keeps them as ways to answer it.
    earlier: tuple[str, ...] = ()

    @property
    def maybe_sent(self) -> bool:
        """Whether the next part may already be on the platform (a crash came between the
        platform taking it and the outbox hearing so): a platform that cannot tell a repeat
        from a new message can say that it is one."""
        return self.attempted > self.sent

    async def part_started(self, index: int) -> None:
        """Part `index` goes to the platform now: call just before handing it over, where the
        platform has no way to refuse a part it already took (Telegram)."""
        self.attempted = max(self.attempted, index + 1)
        await self._save()

    async def part_refused(self, index: int) -> None:
        """The platform refused part `index` (an error answer): it is not out, and sending it
        again is no repeat."""
        self.attempted = min(self.attempted, index)
        await self._save()

    async def part_sent(self, count: int) -> None:
        """`count` parts are out now (call after each one the platform accepted)."""
        self.sent = count
        self.attempted = max(self.attempted, count)
        await self._save()

    async def _save(self) -> None:
        if self.save is not None:
            await self.save(self.sent, self.attempted)


class Undeliverable(Exception):
    """What a sink raises when the platform refused a message for good (the chat is gone, the
    bot was blocked or removed, the request is one it will never take): trying again cannot
    help, so the outbox ends the entry at once instead of retrying it for hours."""


class Sink(Protocol):
    """How an adapter receives what the router sends to an origin on its platform."""

    async def deliver(self, origin: Origin, event: Event, progress: Progress) -> str | None:
        """Show `event` at `origin`; return the platform's message id, if there is one.

        A sink that splits a message reports each part through `progress` and skips the
        `progress.sent` parts an earlier attempt delivered. `Undeliverable` says the platform
        will never take it; any other error is retried."""
        ...

    async def notice(self, origin: Origin, text: str) -> None:
        """A line for the person at `origin` that is not part of any task's conversation
        (a queue position, an expired prompt)."""
        ...


@dataclass(frozen=True, slots=True)
class HttpRoute:
    """A route an adapter serves on the gateway's HTTP server (a platform's webhook).

    It authenticates its callers itself: the API's bearer token does not apply to it. The
    handler takes the HTTP server's request object and returns its response object."""

    method: str
    path: str
    handler: Callable[[Any], Awaitable[Any]]


class Adapter(Protocol):
    """A front-end the gateway runs. Built before any adapter starts, so the routes every
    adapter contributes are known when the HTTP server starts."""

    name: str

    def routes(self) -> Sequence[HttpRoute]:
        """Routes this adapter needs on the gateway's HTTP server; usually none."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...
