"""The cluster port: what the engine asks of the other instances.

Two questions: who runs a session (`Owning`: run a stored task here, or hand it to the
owner), and what of tasks that run elsewhere (`Elsewhere`: their events, prompts, answers
and cancels). A `Cluster` makes both for an engine as it is built, and says how deliveries
and answers are shared. The composition root picks one of the two kinds in
`gateway.cluster` (`OneInstance`, `SeveralInstances`); the engine asks the same questions
of either and never asks which it has.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.auth import Authority
from gateway.engine.dispatch import Dispatch
from gateway.engine.journal import Answer
from gateway.engine.prompts import Prompts, Reply
from gateway.engine.task import Task, TaskState
from gateway.engine.tasks import TaskTable
from gateway.engine.views import Prompt
from gateway.events import Event, Origin
from gateway.store.journals import JournalRecord, PromptAnswers
from gateway.store.sessions import SessionStore


@dataclass(frozen=True, slots=True)
class OwnerParts:
    """What an owner acts through: `take_up` queues journals here; `interrupt` stops a
    session's tasks (keeping their journals); `is_busy(session)` says whether it has tasks
    here; `is_live(task)` whether a task is running or queued here."""

    store: SessionStore
    take_up: Callable[[list[JournalRecord]], Awaitable[int]]
    interrupt: Callable[[str], Coroutine[Any, Any, None]]
    is_busy: Callable[[str], bool]
    is_live: Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class RelayParts:
    """What a view of the other instances' tasks acts through: `cancel_here(session, task,
    by)` cancels a task this one runs when another asks."""

    tasks: TaskTable
    dispatch: Dispatch
    prompts: Prompts
    store: SessionStore
    authority: Authority
    cancel_here: Callable[[str, str, str], Awaitable[bool]]


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


class Elsewhere(Protocol):
    async def publish(self, task: Task, event: Event) -> None:
        """Tell the other instances of an event of a task running here."""

    async def follow(self, task_hash: str) -> TaskState | None:
        """What this instance sees of a task it does not run: None when no instance runs it
        (or this one does: ask the task table first)."""

    def watch(self, state: TaskState) -> None:
        """A task stored or run here goes to another instance: follow it by `state`."""

    def release(self, task_hash: str) -> TaskState | None:
        """This instance takes the task up: the state it followed it by, if any, which the
        task goes on with here."""

    async def prompts(self, session_id: str | None = None) -> list[Prompt]:
        """Open prompts of tasks the other instances run (of one session, when given)."""

    async def answer(
        self, session_id: str | None, task_hash: str, responder: Origin, reply: Reply
    ) -> Answer:
        """Answer the prompt of a task this instance does not run (PromptNotFound if no
        instance does)."""

    async def cancel(self, task: TaskState, by: str) -> bool:
        """Cancel a task another instance runs."""


class Cluster(Protocol):
    """How this instance stands among others, for the engine to build its parts by."""

    # The name this instance claims each delivery under before sending it (None: nothing to
    # claim), and how long a claim holds.
    claimant: str | None
    claim_seconds: float

    def answers(self, store: SessionStore) -> PromptAnswers | None:
        """Where an answer given on any instance is claimed before it counts (None: answers
        are given here only)."""

    def owner(self, parts: OwnerParts) -> Owning:
        """Who runs which session."""

    def elsewhere(self, parts: RelayParts) -> Elsewhere:
        """What of tasks other instances run."""
