"""Canceling tasks: a queued one leaves its queue (whether it waits behind another task of its
session or, heading it, for a free slot), a running one is interrupted, and one that another
instance runs is canceled there (`Elsewhere`). On someone's behalf, only its requester or an
admin may; the caller hears where the task stood."""

from __future__ import annotations

from typing import Literal

from gateway.auth import Authority
from gateway.engine.cluster import Elsewhere
from gateway.engine.errors import TaskNotFound
from gateway.engine.scheduler import Scheduler, Stage
from gateway.engine.task import Task
from gateway.engine.tasks import TaskTable
from gateway.events import Origin
from gateway.ids import validate_session_id

# Where a canceled task stood: here (`Stage`), or on another instance, which canceled it.
Canceled = Stage | Literal["elsewhere"]


class Cancels:
    def __init__(
        self,
        tasks: TaskTable,
        scheduler: Scheduler[Task],
        elsewhere: Elsewhere,
        authority: Authority,
    ) -> None:
        self._tasks = tasks
        self._scheduler = scheduler
        self._elsewhere = elsewhere
        self._authority = authority

    def target(self, session_id: str) -> Task | None:
        """What canceling a session's task without naming one ends: the task that runs, or
        else the one next in line (it waits for a slot, and would run once one frees)."""
        running = self._scheduler.current(session_id)
        if running is not None:
            return running
        return next(iter(self._scheduler.queued(session_id)), None)

    async def cancel(self, session_id: str, task_hash: str = "", *, by: str = "") -> bool:
        """Cancel a task, whether it runs, waits for a slot or waits in its session's queue
        (`target` when no hash is given); whether it was canceled."""
        return await self.stop(session_id, task_hash, by=by) is not None

    async def stop(self, session_id: str, task_hash: str = "", *, by: str = "") -> Canceled | None:
        """`cancel`, saying where the task stood; None when it had ended or is unknown."""
        validate_session_id(session_id)
        target = self._tasks.find(task_hash, session_id) if task_hash else None
        if not task_hash:
            target = self.target(session_id)
        elif target is None:
            followed = await self._elsewhere.follow(task_hash)
            if followed is None or followed.finished or followed.session_id != session_id:
                return None
            canceled = await self._elsewhere.cancel(followed, by or "user")
            return "elsewhere" if canceled else None
        if target is None or target.finished:
            return None
        stage = self._scheduler.stage(target)
        target.cancel_as(by or "user")
        return stage if await self._scheduler.cancel(target) else None

    async def cancel_for(self, who: Origin, session_id: str, task_hash: str) -> Canceled | None:
        """Cancel on behalf of `who`: its requester or an admin (NotAllowed otherwise); where
        the task stood, None when it had ended."""
        task = self._tasks.find(task_hash, session_id) or await self._elsewhere.follow(task_hash)
        if task is None or task.session_id != session_id:
            raise TaskNotFound(f"no task {task_hash} in session {session_id}")
        self._authority.require_requester(who, task.origin, "cancel this task")
        by = who.sender_name or who.sender_id or who.platform
        return await self.stop(session_id, task_hash, by=by)

    async def cancel_all(self, session_id: str, *, by: str = "") -> int:
        """Cancel the session's queued tasks, then its running one; how many were canceled."""
        count = 0
        for task in self._scheduler.queued(session_id):
            count += await self.cancel(session_id, task.task_hash, by=by)
        running = self._scheduler.current(session_id)
        if running is not None:
            count += await self.cancel(session_id, running.task_hash, by=by)
        return count
