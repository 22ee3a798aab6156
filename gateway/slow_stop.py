"""What a shutdown that hangs is waiting on.

A gateway told to stop should be gone in a few seconds; when it is not, the service manager
ends up killing it and nothing says why. Past a deadline this logs, once, where every
asyncio task and every thread stands, so the step that hangs can be named.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import traceback

from gateway.logs import get_logger

log = get_logger(__name__)


class SlowStopReport:
    def __init__(self, after_seconds: float) -> None:
        self.after_seconds = after_seconds
        self._timer: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        """Called when the stop begins."""
        self._timer = asyncio.get_running_loop().call_later(self.after_seconds, self.report)

    def disarm(self) -> None:
        """Called when the stop is over."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def report(self) -> None:
        log.warning(
            "shutdown slow",
            seconds=self.after_seconds,
            tasks=_task_stacks(),
            threads=_thread_stacks(),
        )


def _task_stacks() -> dict[str, str]:
    return {task.get_name(): _awaiting(task.get_coro()) for task in asyncio.all_tasks()}


def _awaiting(awaitable: object) -> str:
    """The chain of awaits a suspended coroutine stands in, outermost first (a task's own
    stack holds only its top frame)."""
    where: list[str] = []
    while awaitable is not None and len(where) < 30:
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None)
        if frame is None:
            where.append(type(awaitable).__name__)  # a future, or a finished coroutine
            break
        where.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        awaitable = getattr(awaitable, "cr_await", None) or getattr(awaitable, "gi_yieldfrom", None)
    return " -> ".join(where)


def _thread_stacks() -> dict[str, str]:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main = threading.main_thread().ident
    return {
        names.get(ident, str(ident)): "".join(traceback.format_stack(frame)[-12:])
        for ident, frame in sys._current_frames().items()
        if ident != main
    }
