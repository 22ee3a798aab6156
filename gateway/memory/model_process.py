"""The local embedding model's own process: its forward passes run there, one at a time.

A pass of the local model is mostly Python (numpy calls between them), so it holds the
interpreter lock while it runs. In the gateway's process a batch of the background indexer
then held the event loop back: with the model on, p99 of `POST /v1/send` went from 293 to 976
ms under load (`bench/http_load.py`). In a process of its own the event loop only waits for its
answers. The worker is started on first use (spawned, not forked: the gateway has threads by
then), reads the model once, and is started again if it dies; it ends with the gateway, and
within half a second of a gateway that was killed (it would otherwise hold the model's memory,
and the gateway's output, open).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from gateway.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T")

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


PARENT_CHECK_SECONDS = 0.5


def _end_with_parent(parent: int) -> None:
    """In the worker: exit once `parent`, the process that started it, is gone. Given by the
    parent rather than read here: one killed while the worker was still starting is gone by
    the time this runs."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            context = multiprocessing.get_context("spawn")
            _pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=context,
                initializer=_end_with_parent,
                initargs=(os.getpid(),),
            )
        return _pool


def _forget(broken: ProcessPoolExecutor) -> None:
    global _pool
    with _pool_lock:
        if _pool is broken:
            _pool = None
    broken.shutdown(wait=False, cancel_futures=True)


class WorkerEnded(RuntimeError):
    """The worker died during a call (killed, out of memory); the next call starts another."""


async def in_worker(work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` in the model's process; `WorkerEnded` when the worker died meanwhile."""
    pool = _worker()
    try:
        return await asyncio.get_running_loop().run_in_executor(pool, work, *args)
    except BrokenProcessPool as exc:
        log.warning("embedding model process ended; starting another", error=repr(exc))
        _forget(pool)
        raise WorkerEnded("the embedding model's process ended; it starts again") from exc


def shut_down() -> None:
    """Stop the worker (tests, a clean exit); the next call starts another."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)
