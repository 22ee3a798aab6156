"""Canceling tasks: a queued one leaves its queue, a running one is interrupted, and one that
another instance runs is canceled there (`Elsewhere`). On someone's behalf, only its
requester or an admin may."""

from __future__ import annotations

from gateway.auth import Authority
from gateway.engine.cluster import Elsewhere
from gateway.engine.errors import TaskNotFound
from gateway.engine.scheduler import Scheduler
from gateway.engine.task import Task
from gateway.engine.tasks import TaskTable
from gateway.events import Origin
from gateway.ids import validate_session_id


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

    async def cancel(self, session_id: str, task_hash: str = "", *, by: str = "") -> bool:
        """Cancel a queued or running task (the running one when no hash is given)."""
        validate_session_id(session_id)
        target = self._tasks.find(task_hash, session_id) if task_hash else None
        if not task_hash:
            target = self._scheduler.current(session_id)
        elif target is None:
            followed = await self._elsewhere.follow(task_hash)
            if followed is None or followed.finished or followed.session_id != session_id:
                return False
            return await self._elsewhere.cancel(followed, by or "user")
        if target is None or target.finished:
            return False
        target.cancel_as(by or "user")
        return await self._scheduler.cancel(target)

    async def cancel_for(self, who: Origin, session_id: str, task_hash: str) -> bool:
        """Cancel on behalf of `who`: its requester or an admin (NotAllowed otherwise)."""
        task = self._tasks.find(task_hash, session_id) or await self._elsewhere.follow(task_hash)
        if task is None or task.session_id != session_id:
            raise TaskNotFound(f"no task {task_hash} in session {session_id}")
        self._authority.require_requester(who, task.origin, "cancel this task")
        by = who.sender_name or who.sender_id or who.platform
        return await self.cancel(session_id, task_hash, by=by)

    async def cancel_all(self, session_id: str, *, by: str = "") -> int:
        """Cancel the session's queued tasks, then its running one; how many were canceled."""
        count = 0
        for task in self._scheduler.queued(session_id):
            count += await self.cancel(session_id, task.task_hash, by=by)
        running = self._scheduler.current(session_id)
        if running is not None:
            count += await self.cancel(session_id, running.task_hash, by=by)
        return count
