"""The tasks this instance follows but does not run: what it shows of each (a `TaskState`),
kept by task hash for whoever waits on one or streams it here.

Memory is bounded like the task table's: past `keep`, the oldest finished ones go.
"""

from __future__ import annotations

from collections import OrderedDict

from gateway.engine.task import TaskState
from gateway.engine.tasks import trim_finished

FOLLOWED_KEPT = 2000


class Followed:
    def __init__(self, keep: int = FOLLOWED_KEPT) -> None:
        self._keep = keep
        self._states: OrderedDict[str, TaskState] = OrderedDict()

    def add(self, state: TaskState) -> TaskState:
        self._states[state.task_hash] = state
        trim_finished(self._states, self._keep)
        return state

    def find(self, task_hash: str) -> TaskState | None:
        return self._states.get(task_hash)

    def unfinished(self) -> list[TaskState]:
        return [state for state in self._states.values() if not state.finished]

    def pop(self, task_hash: str) -> TaskState | None:
        return self._states.pop(task_hash, None)
