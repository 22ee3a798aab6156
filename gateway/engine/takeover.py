"""Journaled tasks this instance takes up, and gives up.

Taken up: tasks whose journal is in the archive but which run nowhere — left by a process
that died (this one's previous life, another instance whose leases lapsed), or stored by
another instance for a session this one holds. Given up: the tasks of a session whose lease
this instance lost; they stop at once, journals kept, and follow whoever takes them.

A task is taken up once: several paths of one instance read the journals (a signal, the
recovery tick, a lane's refresh before its next task), and a journal read a moment ago may
belong to a task stored, queued or finished here since.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.engine.cluster import Elsewhere
from gateway.engine.journal import RECEIVED_BY, JournalHead, Replay, replay_of
from gateway.engine.scheduler import Scheduler
from gateway.engine.task import Task
from gateway.engine.tasks import TaskTable
from gateway.logs import get_logger
from gateway.store.journals import JournalRecord
from gateway.store.sessions import SessionStore

log = get_logger(__name__)


class Takeover:
    def __init__(
        self,
        store: SessionStore,
        tasks: TaskTable,
        scheduler: Scheduler[Task],
        elsewhere: Elsewhere,
        restore_lines: Callable[[list[JournalHead]], Awaitable[int]],
        here: str | None = None,
    ) -> None:
        self.store = store
        # Writes the `user` lines of taken-up tasks a crash cut off (Dispatch): alone (`here`
        # None), of every task; one of several, of those whose message reached this instance
        # (the journal says which), as each home's action.log records what happened there.
        self.restore_lines = restore_lines
        self.here = here
        self.tasks = tasks
        self.scheduler = scheduler
        # Follows the tasks this instance gives up, and hands back those it takes up again.
        self.elsewhere = elsewhere
        # Tasks whose journal is committed but which are not in the task table yet (the
        # intake fills this): a journal read meanwhile must not take them up.
        self.accepting: set[str] = set()

    def is_live(self, task_hash: str) -> bool:
        """Whether the task is this instance's: being stored, queued, running or finished here."""
        if task_hash in self.accepting:
            return True
        return task_hash in self.tasks

    async def take_up(self, records: list[JournalRecord]) -> int:
        """Queue journaled tasks here (the caller holds their session); returns how many."""
        found: list[tuple[JournalHead, JournalRecord]] = []
        for record in records:
            try:
                found.append((JournalHead.of(record), record))
            except (KeyError, TypeError, ValueError):
                log.warning("unreadable journal set aside", task=record.task_hash)
        for session_id in dict.fromkeys(head.session_id for head, _ in found):
            await self.store.catch_up_history(session_id)
        await self.restore_lines(
            [
                head
                for head, record in found
                if not self.is_live(head.task_hash)
                and (self.here is None or record.origin.get(RECEIVED_BY) == self.here)
            ]
        )
        # Checked again now, with nothing awaited before the enqueue: another path of this
        # instance may have taken a task up, or stored it, since its journal was read.
        fresh = [(head, record) for head, record in found if not self.is_live(head.task_hash)]
        taken: list[Task] = []
        for head, record in fresh:
            followed = self.elsewhere.release(head.task_hash)
            replay = replay_of(record, oldest=self._first_here(head))
            taken.append(self.tasks.take_over(head, replay, followed))
            self.scheduler.enqueue(taken[-1])
        for task in taken:
            await self._steered_into(task)
        return len(fresh)

    def _first_here(self, head: JournalHead) -> bool:
        """Whether nothing of its session runs or waits here ahead of it: then it may be the
        task a previous life was running, with nothing journaled yet."""
        if self.scheduler.current(head.session_id) is not None:
            return False
        queued = self.scheduler.queued(head.session_id)
        return all(task.order > head.user_message_id for task in queued)

    async def _steered_into(self, task: Task) -> None:
        """The messages a previous life of `task` took in end here as collected into it, so
        whoever asks for them hears which task answers them."""
        for step in task.journal.replay.steered:
            if step.head.task_hash in self.tasks:
                continue
            steered = self.tasks.add(step.head, step.attachments, Replay())
            await steered.journal.close(recorded=True)  # it went with the steering
            await steered.collect_into(task.task_hash)
            self.tasks.ended(steered)

    async def interrupt(self, session_id: str) -> None:
        """This instance may no longer run the session (its lease is lost): its tasks stop
        here at once, journals kept, and follow the instance that takes them up."""
        running = self.scheduler.current(session_id)
        dropped = await self.scheduler.interrupt(session_id)
        for task in [*dropped, *([running] if running else [])]:
            state = self.tasks.drop(task)
            await state.update(status="queued", prompt=None)
            self.elsewhere.watch(state)
        log.warning("session given up", session=session_id, tasks=len(dropped) + bool(running))
