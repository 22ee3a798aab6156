"""What the engine asks about tasks that may run on another instance, and the answers when
there is no other instance.

Two kinds stand behind `Elsewhere`: `SingleInstance` (here), for a gateway that runs alone,
and `gateway.engine.relay.Relay`, for several instances on one archive and one bus. The
engine asks the same questions of either and never asks which it has.
"""

from __future__ import annotations

from typing import Protocol

from gateway.engine.journal import Answer
from gateway.engine.prompts import PromptNotFound
from gateway.engine.task import Prompt, Task
from gateway.engine.tasks import TaskTable
from gateway.events import Event, Origin


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
