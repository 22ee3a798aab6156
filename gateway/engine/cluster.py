"""What the engine asks of the other instances, and the answers when there are none.

Two questions: who runs a session (`Owning`: run a stored task here, or hand it to the
owner), and what of tasks that run elsewhere (`Elsewhere`: their events, prompts, answers
and cancels). A gateway that runs alone has `SoleOwner` and `SingleInstance` (here); several
instances on one archive and one bus have `gateway.engine.ownership.Ownership` and
`gateway.engine.relay.Relay`. The engine asks the same questions of either and never asks
which it has.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.engine.journal import Answer
from gateway.engine.prompts import PromptNotFound
from gateway.engine.task import Prompt, Task
from gateway.engine.tasks import TaskTable
from gateway.events import Event, Origin
from gateway.keyed_locks import KeyedLocks
from gateway.store.journals import JournalRecord
from gateway.store.sessions import SessionStore


class Owning(Protocol):
    async def run_here(self, session_id: str, enqueue: Callable[[], int]) -> int | None:
        """Queue a stored task here if this instance runs (or can take) the session, and
        return what `enqueue` returns (its place in the queue); None when another instance
        takes it (or this one is stopping: the journal keeps it for the next start)."""

    async def adopt(self, session_id: str) -> int:
        """Take the session's unfinished journals that nobody runs; returns how many."""

    async def refresh(self, session_id: str) -> None:
        """Before the session's next task: take up what other instances stored for it."""

    async def idle(self, session_id: str) -> None:
        """The session has nothing left to run here."""

    async def close(self, had: list[str]) -> None:
        """Shutting down; `had`: the sessions this instance ran."""


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


class Elsewhere(Protocol):
    async def publish(self, task: Task, event: Event) -> None:
        """Tell the other instances of an event of a task running here."""

    async def follow(self, task_hash: str) -> Task | None:
        """The task as this instance knows it: its own, or a view of one another instance
        runs; None when no instance runs it."""

    async def prompts(self, session_id: str | None = None) -> list[Prompt]:
        """Open prompts of tasks the other instances run (of one session, when given)."""

    async def answer(
        self,
        session_id: str,
        task_hash: str,
        responder: Origin,
        *,
        approve: bool | None,
        text: str | None,
    ) -> Answer:
        """Answer the prompt of a task this instance does not run (PromptNotFound if no
        instance does)."""

    async def cancel(self, task: Task, by: str) -> bool:
        """Cancel a task another instance runs."""


class SingleInstance:
    """No other instance: every task is this one's, and nothing needs telling."""

    def __init__(self, tasks: TaskTable) -> None:
        self._tasks = tasks

    async def publish(self, task: Task, event: Event) -> None:
        return None

    async def follow(self, task_hash: str) -> Task | None:
        return self._tasks.find(task_hash)

    async def prompts(self, session_id: str | None = None) -> list[Prompt]:
        return []

    async def answer(
        self,
        session_id: str,
        task_hash: str,
        responder: Origin,
        *,
        approve: bool | None,
        text: str | None,
    ) -> Answer:
        raise PromptNotFound(f"no task {task_hash} in session {session_id}")

    async def cancel(self, task: Task, by: str) -> bool:
        return False  # no task of another instance is ever known here
