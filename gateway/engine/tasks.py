"""The tasks this process knows: running, queued, and the most recent finished ones.

Memory is bounded: at most `FINISHED_TASKS_KEPT` finished tasks are kept (their status, reply
and prompt answer, for the task route and late waiters), and only the newest
`FINISHED_EVENTS_KEPT` of them keep their events (a long reply is hundreds of text deltas); an
older one answers with its outcome and no events, as a task finished before a restart does.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator

from gateway.engine.journal import Journal, JournalHead, Replay
from gateway.engine.task import Task, TaskNotFound
from gateway.events import Attachment
from gateway.store.sessions import SessionStore

# Finished tasks stay answerable (task route, late waiters) until this many newer ones exist.
FINISHED_TASKS_KEPT = 2000
FINISHED_EVENTS_KEPT = 200


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
        task = Task(
            session_id=head.session_id,
            task_hash=head.task_hash,
            origin=head.origin,
            text=head.text,
            attachments=attachments,
            user_message_id=head.user_message_id,
            user_sent_at=head.user_sent_at,
            submitted_at=head.submitted_at,
            journal=Journal(self._store, head, replay),
        )
        self._tasks[task.task_hash] = task
        while len(self._tasks) > self._keep:
            oldest_hash, oldest = next(iter(self._tasks.items()))
            if not oldest.finished:
                break
            del self._tasks[oldest_hash]
        return task

    def ended(self, task: Task) -> None:
        """`task` finished: the oldest finished tasks beyond `keep_events` let their events go."""
        self._with_events.append(task)
        while len(self._with_events) > self._keep_events:
            self._with_events.popleft().events.clear()

    def take_over(self, head: JournalHead, replay: Replay) -> Task:
        """The task for `head`, to run here from its journal: this instance's view of it when
        it has one (whoever waits on or streams it keeps the same task), else a new one."""
        known = self._tasks.get(head.task_hash)
        if known is None or not known.elsewhere:
            return self.add(head, tuple(known.attachments) if known else (), replay)
        known.journal = Journal(self._store, head, replay)
        known.prompt = known.answer = known.prompt_step = None
        known.elsewhere, known.status = False, "queued"
        return known

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
