"""What a message that arrives while its session runs a task does: the session's queue mode
(`/queue`, kept with its settings).

- `followup` (the default): it waits for a task of its own, after the running one.
- `collect`: it waits; when the running task ends, one task answers everything that waited:
  the newest message's, which sees the others in its window (they were archived before it, in
  order). The others end as "collected" into it. Their journals go before it runs: after a
  crash in between, the newest replays and still sees them; before, the queue is collected
  again on the next start.
- `steer`: the running task takes it at its next step, when its agent asks
  (`AgentContext.steering`); an agent that never asks leaves it to run as a follow-up. What it
  takes is in its journal, saved in the transaction that drops the journals of the tasks that
  brought it: after a crash the running task replays with it, and nothing else answers it.
- `interrupt`: the running task and those waiting are canceled; the newest is answered next.

Only tasks that have not started are collected or steered: one replaying a step it took
before a crash (a tool, a prompt, a message steered in), or the oldest of its session after a
restart (it may have been running, with nothing journaled yet), keeps its own run. The mode
is read only when it matters (a busy session), so a message to an idle session costs no extra
read.
"""

from __future__ import annotations

from gateway.crash import NO_CRASH, CrashPoints
from gateway.engine.dispatch import Dispatch
from gateway.engine.journal import Steered
from gateway.engine.scheduler import Scheduler
from gateway.engine.task import Task
from gateway.engine.tasks import TaskTable
from gateway.logs import get_logger
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

INTERRUPTED_BY = "a newer message"


class QueueModes:
    def __init__(
        self,
        store: SessionStore,
        scheduler: Scheduler[Task],
        dispatch: Dispatch,
        tasks: TaskTable,
        crash: CrashPoints = NO_CRASH,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.dispatch = dispatch
        self.tasks = tasks
        self.crash = crash

    async def mode(self, session_id: str) -> str:
        return await self.store.queue_mode(session_id)

    async def gather(self, session_id: str, waiting: list[Task]) -> None:
        """Before the next task of a session with several waiting: in `collect` mode, the
        newest takes the others in."""
        if not all(_fresh(task) for task in waiting):
            return
        if await self.mode(session_id) != "collect":
            return
        newest = waiting[-1]
        taken = [task for task in waiting[:-1] if self.scheduler.take_out(task)]
        for task in taken:
            await self._collected(task, into=newest)
        self.crash.reach("collected")
        if taken:
            await self.dispatch.notice(
                newest.origin, f"collected {len(taken) + 1} messages", newest
            )

    async def steer(self, running: Task) -> list[Steered]:
        """The messages `running` takes in now (`steer` mode), in order: after a restart first
        those its journal says it took before, then those waiting behind it. A message is
        journaled as the running task's, and its own task's journal goes, in one transaction
        before the agent sees it: a crash then replays it with the running task, and only
        there; one before leaves it a task of its own."""
        again = running.journal.replay.take_steered()
        sid = running.session_id
        waiting = [task for task in self.scheduler.queued(sid) if _fresh(task)]
        if not waiting or await self.mode(sid) != "steer":
            return again
        taken = [task for task in waiting if self.scheduler.take_out(task)]
        steps = [Steered(task.journal.head, tuple(task.attachments)) for task in taken]
        running.journal.steps.extend(steps)
        try:
            await running.save_journal(collected=[task.task_hash for task in taken])
        except BaseException:
            # Not taken in: the messages stay tasks of their own, answered after this one.
            del running.journal.steps[-len(steps) :]
            for task in taken:
                self.scheduler.enqueue(task)
            log.warning("messages not steered in: the journal could not be saved", session=sid)
            raise
        self.crash.reach("steered")
        for task in taken:
            await self._collected(task, into=running, journal_gone=True)
        return again + steps

    async def interrupt_for(self, newest: Task) -> bool:
        """In `interrupt` mode, cancel what runs or waits ahead of `newest`; whether it did."""
        sid = newest.session_id
        if await self.mode(sid) != "interrupt":
            return False
        ahead = [task for task in self.scheduler.queued(sid) if task is not newest]
        running = self.scheduler.current(sid)
        if running is not None and running is not newest:
            ahead.append(running)
        for task in ahead:
            if not task.finished:
                task.cancel_as(INTERRUPTED_BY)
                await self.scheduler.cancel(task)
        return bool(ahead)

    async def _collected(self, task: Task, *, into: Task, journal_gone: bool = False) -> None:
        """`task` ends as collected into `into`; `journal_gone`: its journal went already
        (with the save of `into`'s)."""
        await task.journal.close(recorded=journal_gone)
        await task.collect_into(into.task_hash)
        self.tasks.ended(task)
        log.info(
            "message collected", session=task.session_id, task=task.task_hash, into=into.task_hash
        )


def _fresh(task: Task) -> bool:
    """Whether `task` has not begun, in this life or (as far as can be told) a previous one."""
    return task.status == "queued" and not task.journal.replay.started and task.prompt is None
