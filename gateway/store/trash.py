"""Emptying the sessions' trash in the background: deleting a session moves its folder there
(one rename), and the files go afterwards, on a thread, without anyone waiting for them."""

from __future__ import annotations

import asyncio
import threading

from gateway.logs import get_logger
from gateway.store.files import SessionsDir

log = get_logger(__name__)


class TrashEmptier:
    """One emptying at a time; a deletion during one asks for another pass after it."""

    def __init__(self, dirs: SessionsDir) -> None:
        self.dirs = dirs
        self._stop = threading.Event()
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def kick(self) -> None:
        """Empty the trash soon. Called on the event loop."""
        if self._stop.is_set():
            return  # closing: what is left is emptied on the next start
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="agenvoy-empty-trash")
        else:
            self._again = True

    async def _run(self) -> None:
        while True:
            self._again = False
            try:
                removed = await asyncio.to_thread(self.dirs.empty_trash, self._stop)
            except OSError:
                log.exception("emptying the sessions' trash failed")
                return
            if removed:
                log.debug("emptied the sessions' trash", folders=removed)
            if not self._again or self._stop.is_set():
                return

    async def settled(self) -> None:
        """Wait until no emptying is under way (for tests and benchmarks)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self) -> None:
        """Stop after the folder being removed now; the rest waits for the next start."""
        self._stop.set()
        if self._task is not None:
            await self._task
