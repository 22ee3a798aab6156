"""A gateway that runs alone: it owns every session, no task runs anywhere else, and
nothing needs telling or claiming."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from gateway.cluster.followed import Followed
from gateway.engine.cluster import OwnerParts, RelayParts
from gateway.engine.journal import Answer
from gateway.engine.prompts import Reply, no_such_task
from gateway.engine.task import Task, TaskState
from gateway.engine.views import Prompt
from gateway.events import Event, Origin
from gateway.keyed_locks import KeyedLocks
from gateway.store.journals import JournalRecord, PromptAnswers
from gateway.store.sessions import SessionStore


class OneInstance:
    claimant: str | None = None
    claim_seconds = 30.0

    def answers(self, store: SessionStore) -> PromptAnswers | None:
        return None

    def owner(self, parts: OwnerParts) -> SoleOwner:
        return SoleOwner(parts.store, take_up=parts.take_up, is_live=parts.is_live)

    def elsewhere(self, parts: RelayParts) -> SingleInstance:
        return SingleInstance()


class SoleOwner:
    """Alone, this instance owns every session: a stored task runs here, and nothing is
    stored by anyone else to take up before the next one."""

    def __init__(
        self,
        store: SessionStore,
        *,
        take_up: Callable[[list[JournalRecord]], Awaitable[int]],
        is_live: Callable[[str], bool],
    ) -> None:
        """`take_up` queues journals here; `is_live(task)` says whether a task is running or
        queued here."""
        self._store = store
        self._take_up = take_up
        self._is_live = is_live
        # A task queued while the session's journals are read would be taken up twice.
        self._locks = KeyedLocks()
        self._closing = False

    def _holding(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self._locks.hold(session_id)

    async def run_here(self, session_id: str, enqueue: Callable[[], int]) -> int | None:
        async with self._holding(session_id):
            return None if self._closing else enqueue()

    async def adopt(self, session_id: str) -> int:
        async with self._holding(session_id):
            if self._closing:
                return 0
            records = await self._store.unfinished(session_id)
            return await self._take_up([r for r in records if not self._is_live(r.task_hash)])

    async def refresh(self, session_id: str) -> None:
        return None

    async def idle(self, session_id: str) -> None:
        return None

    async def close(self, had: list[str]) -> None:
        self._closing = True


class SingleInstance:
    """No other instance: every task is this one's, and nothing needs telling. What it
    follows are only the tasks stored while it was stopping: the next start runs them."""

    def __init__(self) -> None:
        self._followed = Followed()

    async def publish(self, task: Task, event: Event) -> None:
        return None

    async def follow(self, task_hash: str) -> TaskState | None:
        return self._followed.find(task_hash)

    def watch(self, state: TaskState) -> None:
        self._followed.add(state)

    def release(self, task_hash: str) -> TaskState | None:
        return self._followed.pop(task_hash)

    async def prompts(self, session_id: str | None = None) -> list[Prompt]:
        return []

    async def answer(
        self, session_id: str | None, task_hash: str, responder: Origin, reply: Reply
    ) -> Answer:
        raise no_such_task(task_hash, session_id)

    async def cancel(self, task: TaskState, by: str) -> bool:
        return False  # no other instance runs it
