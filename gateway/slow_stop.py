"""A stop that hangs: what it is waiting on, and a bounded end.

A gateway told to stop should be gone in a few seconds. When it is not, this logs, once, where
every asyncio task and every thread stands (the event loop's thread too), so the step that
hangs can be named; and past a later deadline it ends the process. That loses nothing: what a
stop would save is what a crash at any step keeps already (the archive, the journals, the
outbox), and a service manager would kill the process anyway, later and without a word.

The watch runs on a thread of its own, so it fires even when the event loop itself is stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Callable

from gateway.logs import get_logger
from gateway.threads import daemon_thread

log = get_logger(__name__)

FORCED_EXIT_STATUS = 70  # EX_SOFTWARE: the stop did not finish by itself


class SlowStopWatch:
    def __init__(
        self,
        report_after: float,
        force_after: float,
        *,
        exit: Callable[[int], object] = os._exit,
    ) -> None:
        self.report_after = report_after
        self.force_after = force_after
        self._exit = exit
        self._done = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None  # the watch, once armed

    def arm(self) -> None:
        """Called on the event loop when the stop begins."""
        self._loop = asyncio.get_running_loop()
        self.thread = daemon_thread(self._watch, "agenvoy-stop-watch")
        self.thread.start()

    def disarm(self) -> None:
        """Called when the stop is over."""
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.report_after):
            return
        self.report()
        if self._done.wait(max(0.0, self.force_after - self.report_after)):
            return
        log.error("shutdown forced", seconds=self.force_after, status=FORCED_EXIT_STATUS)
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        self._exit(FORCED_EXIT_STATUS)

    def report(self) -> None:
        log.warning(
            "shutdown slow",
            seconds=self.report_after,
            tasks=_task_stacks(self._loop),
            threads=_thread_stacks(),
        )


def _task_stacks(loop: asyncio.AbstractEventLoop | None) -> dict[str, str]:
    if loop is None:
        return {}
    for _ in range(3):  # the loop's thread may change the set of tasks meanwhile
        try:
            tasks = list(asyncio.all_tasks(loop))
            break
        except RuntimeError:
            continue
    else:
        return {}
    return {task.get_name(): _awaiting(task.get_coro()) for task in tasks}


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
    own = threading.get_ident()
    return {
        names.get(ident, str(ident)): "".join(traceback.format_stack(frame)[-12:])
        for ident, frame in sys._current_frames().items()
        if ident != own
    }
