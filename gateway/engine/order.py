"""Arrival order per session: whoever takes a turn first is served first.

A message is stored and queued inside its turn, so the order of the archive and the order
of the queue are one. An adapter that has work to do before it can hand a message over
(downloading attachments) takes its turn as soon as the message arrives, synchronously, so a
later message of the same chat cannot overtake it meanwhile.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class Turns:
    def __init__(self) -> None:
        # The future of the latest turn taken per session; each turn waits on the one before.
        self._latest: dict[str, asyncio.Future[None]] = {}

    def take(self, key: str) -> Turn:
        """A place in `key`'s line, behind every turn taken before. Never blocks."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        before = self._latest.get(key)
        self._latest[key] = done
        return Turn(self, key, before, done)

    def waiting(self, key: str) -> bool:
        latest = self._latest.get(key)
        return latest is not None and not latest.done()

    def _forget(self, key: str, done: asyncio.Future[None]) -> None:
        if self._latest.get(key) is done:
            del self._latest[key]


class Turn:
    """`async with turn:` waits until every earlier turn of its key has ended, and ends this
    one on the way out. A turn that is never entered ends with `end()` (or by leaving a
    `with turn:` block), and still lets later turns go only after the earlier ones."""

    def __init__(
        self,
        turns: Turns,
        key: str,
        before: asyncio.Future[None] | None,
        done: asyncio.Future[None],
    ) -> None:
        self.key = key
        self._turns = turns
        self._before = before
        self._done = done

    async def __aenter__(self) -> Turn:
        if self._before is not None and not self._before.done():
            try:
                # Shielded: the future is shared with the turn before, which must not be
                # canceled because this one was.
                await asyncio.shield(self._before)
            except asyncio.CancelledError:
                self.end()
                raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end()

    def __enter__(self) -> Turn:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end()

    @property
    def ended(self) -> bool:
        return self._done.done()

    def end(self) -> None:
        """Let the next turn go once the ones before this have ended. Idempotent."""
        if self._done.done():
            return
        before = self._before
        if before is None or before.done():
            self._finish()
        else:
            before.add_done_callback(lambda _: self._finish())

    def _finish(self) -> None:
        if not self._done.done():
            self._done.set_result(None)
        self._turns._forget(self.key, self._done)
