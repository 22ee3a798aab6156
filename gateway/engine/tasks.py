"""The tasks this process knows: running, queued, and the most recent finished ones.

Memory is bounded: at most `FINISHED_TASKS_KEPT` finished tasks are kept (their status, reply
and prompt answer, for the task route and late waiters), and only the newest
`FINISHED_EVENTS_KEPT` of them keep their events (a long reply is hundreds of text deltas); an
older one answers with its outcome and no events, as a task finished before a restart does.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from typing import Protocol, TypeVar

from gateway.engine.errors import TaskNotFound
from gateway.engine.journal import Journal, JournalHead, Replay
from gateway.engine.task import Task, TaskState
from gateway.events import Attachment
from gateway.store.sessions import SessionStore

# Finished tasks stay answerable (task route, late waiters) until this many newer ones exist.
FINISHED_TASKS_KEPT = 2000
FINISHED_EVENTS_KEPT = 200


class Finishes(Protocol):
    @property
    def finished(self) -> bool: ...


F = TypeVar("F", bound=Finishes)


def trim_finished(tasks: OrderedDict[str, F], keep: int) -> None:
    """Drop the oldest tasks past `keep`, as long as they are finished: one still going stays
    (and so do the newer ones behind it) until it ends."""
    while len(tasks) > keep:
        oldest_hash, oldest = next(iter(tasks.items()))
        if not oldest.finished:
            return
        del tasks[oldest_hash]


class TaskTable:
    def __init__(
        self,
        store: SessionStore,
        keep: int = FINISHED_TASKS_KEPT,
        keep_events: int = FINISHED_EVENTS_KEPT,
    ) -> None:
        self._store = store
        self._keep = keep
        self._keep_events = keep_events
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        self._with_events: deque[Task] = deque()  # finished, events still held, oldest first

    def add(self, head: JournalHead, attachments: tuple[Attachment, ...], replay: Replay) -> Task:
        """A new task for `head`, with its journal; the oldest finished tasks make room."""
        return self._keep_new(Task(head, attachments, Journal(self._store, head, replay)))

    def take_over(self, head: JournalHead, replay: Replay, state: TaskState | None) -> Task:
        """A task for `head` to run here from its journal; `state`: what this instance showed
        of it while another instance ran it (whoever waits on or streams it goes on following
        the same state), reset to queued."""
        if state is None:
            return self.add(head, (), replay)
        state.run_here()
        return self._keep_new(Task(head, (), Journal(self._store, head, replay), state))

    def _keep_new(self, task: Task) -> Task:
        self._tasks[task.task_hash] = task
        trim_finished(self._tasks, self._keep)
        return task

    def ended(self, task: Task) -> None:
        """`task` finished: the oldest finished tasks beyond `keep_events` let their events go."""
        self._with_events.append(task)
        while len(self._with_events) > self._keep_events:
            self._with_events.popleft().state.forget_events()

    def drop(self, task: Task) -> TaskState:
        """Forget `task`, which another instance runs from now on; its state, for this
        instance to follow it by."""
        self._tasks.pop(task.task_hash, None)
        return task.state

    def get(self, task_hash: str) -> Task:
        try:
            return self._tasks[task_hash]
        except KeyError:
            raise TaskNotFound(f"no such task: {task_hash}") from None

    def find(self, task_hash: str, session_id: str | None = None) -> Task | None:
        """The task, if it is known (and of `session_id`, when given)."""
        task = self._tasks.get(task_hash)
        if task is None or (session_id is not None and task.session_id != session_id):
            return None
        return task

    def __contains__(self, task_hash: object) -> bool:
        return task_hash in self._tasks

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks.values())
