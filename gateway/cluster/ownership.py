"""Which sessions this instance runs, and how sessions move between instances.

Exactly one instance runs a session's tasks: the one holding the session's lease
(`gateway.leases`). Any instance stores a message it receives (with its task's journal, in the
shared archive); if it can take the lease it runs the task, and otherwise it signals the owner
("journal" on the bus), which takes up the session's new journals in archive order. An owner
lets the lease go when the session has nothing left to run; one that dies loses its leases with
its database connection, and whoever next finds the session's journals takes it over.

A gateway that runs alone has `gateway.cluster.one.SoleOwner` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any

from gateway.bus import Bus
from gateway.keyed_locks import KeyedLocks
from gateway.leases import Leases
from gateway.logs import get_logger
from gateway.store.errors import until_available
from gateway.store.journals import JournalRecord
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

JOURNAL = "journal"  # bus topic: a task was stored for {"session_id": ...}
# An idle session's lease is kept this long before it is let go: a chat that writes again
# soon pays no lease round trips and no check for journals stored elsewhere (another
# instance that receives its message meanwhile signals this one, as for a busy session).
LINGER_SECONDS = 2.0


def lease_of(session_id: str) -> str:
    return f"session:{session_id}"


class Ownership:
    def __init__(
        self,
        leases: Leases,
        bus: Bus,
        store: SessionStore,
        *,
        take_up: Callable[[list[JournalRecord]], Awaitable[int]],
        interrupt: Callable[[str], Coroutine[Any, Any, None]],
        is_busy: Callable[[str], bool],
        is_live: Callable[[str], bool],
    ) -> None:
        """`take_up` queues journals here; `interrupt` stops a session's tasks (keeping their
        journals); `is_busy(session)` says whether it has tasks here; `is_live(task)` whether a
        task is running or queued here."""
        self.leases = leases
        self.bus = bus
        self.store = store
        self._take_up = take_up
        self._interrupt = interrupt
        self._is_busy = is_busy
        self._is_live = is_live
        self._locks = KeyedLocks()
        self._closing = False
        self._stopping: set[asyncio.Task[None]] = set()
        self._lingering: dict[str, asyncio.Task[None]] = {}
        bus.on(JOURNAL, self._on_journal)
        leases.on_lost(self._on_lost)

    def _holding(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """One decision about a session's lease at a time (claim and enqueue, or let go)."""
        return self._locks.hold(session_id)

    async def run_here(self, session_id: str, enqueue: Callable[[], int]) -> int | None:
        """Queue a stored task here if this instance runs (or can take) the session, and
        return what `enqueue` returns (its place in the queue); signal the owner and return
        None otherwise."""
        async with self._holding(session_id):
            if not self._closing and await self.leases.acquire(lease_of(session_id)):
                return enqueue()
        await self.bus.publish(JOURNAL, {"session_id": session_id}, keep=True)
        return None

    async def adopt(self, session_id: str) -> int:
        """Take the session's unfinished journals that nobody runs; returns how many."""
        async with self._holding(session_id):
            if self._closing or not await self.leases.acquire(lease_of(session_id)):
                return 0
            taken = await self._take_up(await self._unknown(session_id, wait=False))
            if not taken and not self._is_busy(session_id):
                await self.leases.release(lease_of(session_id))
            return taken

    async def refresh(self, session_id: str) -> None:
        """Before the session's next task: take up what other instances stored for it, so
        tasks run in archive order whoever received them."""
        if self.leases.holds(lease_of(session_id)):
            # The journals and the history's side of the archive in one read: before every task.
            journals, seen = await until_available(
                lambda: self.store.journals_and_resync_view(session_id),
                sleep=asyncio.sleep,
                what="looking for a session's tasks stored elsewhere",
            )
            await self._take_up([r for r in journals if not self._is_live(r.task_hash)])
            await until_available(
                lambda: self.store.resync_history(session_id, seen),
                sleep=asyncio.sleep,
                what="bringing a session's history.json up to date",
            )

    async def idle(self, session_id: str) -> None:
        """The session has nothing left to run here: let its lease go after a linger, unless
        a task was stored for it meanwhile."""
        if not self._closing:
            running = self._lingering.get(session_id)
            if running is None or running.done():
                job = asyncio.create_task(self._let_go_later(session_id))
                self._lingering[session_id] = job
                job.add_done_callback(lambda done: self._forget_linger(session_id, done))

    def _forget_linger(self, session_id: str, job: asyncio.Task[None]) -> None:
        if self._lingering.get(session_id) is job:
            del self._lingering[session_id]

    async def _let_go_later(self, session_id: str) -> None:
        await asyncio.sleep(LINGER_SECONDS)
        await self._let_go(session_id)

    async def _let_go(self, session_id: str) -> None:
        async with self._holding(session_id):
            if self._is_busy(session_id) or not self.leases.holds(lease_of(session_id)):
                return
            if await self._take_up(await self._unknown(session_id)):
                return
            await self.leases.release(lease_of(session_id))

    async def _unknown(self, session_id: str, *, wait: bool = True) -> list[JournalRecord]:
        """The session's journals not live here. A read: while the database is unreachable it
        is asked again (a stop cancels the wait) rather than fail the session's queue or its
        letting go; without `wait` (a bus signal, whose reader must not stall, or a recovery
        tick, which comes again) the error is raised."""
        read = partial(self.store.unfinished, session_id)
        if wait:
            what = "looking for a session's tasks stored elsewhere"
            records = await until_available(read, sleep=asyncio.sleep, what=what)
        else:
            records = await read()
        return [r for r in records if not self._is_live(r.task_hash)]

    async def _on_journal(self, message: dict[str, Any]) -> None:
        session_id = message.get("session_id")
        if isinstance(session_id, str):
            await self.adopt(session_id)

    def _on_lost(self, leases: frozenset[str]) -> None:
        """The lease connection failed: another instance may take these sessions any moment.
        Their tasks stop here at once (journals kept)."""
        for name in leases:
            if name.startswith("session:"):
                job = asyncio.create_task(self._interrupt(name.removeprefix("session:")))
                self._stopping.add(job)
                job.add_done_callback(self._stopping.discard)

    async def close(self, had: list[str]) -> None:
        """Shutting down: after this instance let its leases go, tell the others that the
        sessions it ran (`had`) have journals to take up, so they need not wait."""
        self._closing = True
        lingering = dict(self._lingering)
        for job in lingering.values():
            job.cancel()
        await asyncio.gather(*lingering.values(), return_exceptions=True)
        for session_id in lingering:
            await self.leases.release(lease_of(session_id))
        for session_id in had:
            await self.leases.release(lease_of(session_id))
        for session_id in had:
            await self.bus.publish(JOURNAL, {"session_id": session_id}, keep=True)
