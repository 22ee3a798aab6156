"""SQLite's reader threads: a few threads, each with a connection of its own for its whole life,
taking reads from one queue.

A read is a queue entry and an asyncio future, answered with one callback on the caller's loop.
Through a thread pool it also paid for a concurrent future, its condition variable, the chaining
back to asyncio and a connection pool checkout and return: more than the few SQLite statements
most reads run, on the path every message takes. Several threads rather than one, so that a long
read (a search over a large archive) does not hold up the short ones behind it.

The lean reads every message makes (`gateway.store.lean`: a token stamp, the caller's facts, a
session's context) go to one thread of their own, `LeanReads`, which runs whatever queued up
while it was busy in one snapshot: one BEGIN and one ROLLBACK and one wake-up of the loop for
the batch. Each of them used to pay those alone, on one of several threads taking turns at the
interpreter lock, which under load cost more than its statements. A read of a batch sees every
write committed before it was queued, since the snapshot begins after it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import Connection

from gateway.store.batching import BatchThread, Job, answer
from gateway.store.lean import Lean
from gateway.threads import daemon_thread

T = TypeVar("T")

MAX_LEAN_BATCH = 64  # bounds how long the first read of a batch waits for the others


class ReaderThreads:
    """`count` threads reading through `engine`, one connection each, opened on first use."""

    def __init__(self, engine: Engine, count: int, name: str) -> None:
        self._engine = engine
        self._queue: queue.SimpleQueue[Job[Any] | None] = queue.SimpleQueue()
        self._closed = False
        self._threads = [daemon_thread(self._serve, f"{name}_{i}") for i in range(count)]
        for thread in self._threads:
            thread.start()

    async def run(self, call: Callable[[Connection], T]) -> T:
        """Run `call` with a reader's connection (outside any transaction) and wait for it."""
        if self._closed:
            # Nobody would take it: fail now rather than wait for ever.
            raise RuntimeError("the database is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(Job(call, loop, future))
        return await future

    def close(self) -> None:
        """Finish what is queued, then stop the threads (blocking: call it from a thread)."""
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()

    def _serve(self) -> None:
        conn: Connection | None = None
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    return
                try:
                    if conn is None:
                        conn = self._engine.connect()
                    job.result = job.call(conn)
                except Exception as exc:
                    job.error = exc
                    # Whatever state the failure left the connection in, the next read starts
                    # on a fresh one.
                    if conn is not None:
                        with contextlib.suppress(Exception):
                            conn.close()
                        conn = None
                answer([job])
        finally:
            if conn is not None:
                conn.close()


class LeanReads(BatchThread):
    """One thread with one connection for its life, running lean reads in batches."""

    def __init__(self, engine: Engine, name: str) -> None:
        self._engine = engine
        self._conn: Connection | None = None
        super().__init__(name, MAX_LEAN_BATCH)

    async def run(self, work: Callable[[Lean], T]) -> T:
        return await self.submit(work)

    def close(self) -> None:
        super().close()
        if self._conn is not None:
            self._conn.close()

    def handle(self, batch: list[Job[Any]]) -> list[Job[Any]]:
        try:
            if self._conn is None:
                self._conn = self._engine.connect()
            driver = self._conn.connection.dbapi_connection
            assert driver is not None
            driver.execute("BEGIN")  # one snapshot for the batch
        except Exception as exc:
            for job in batch:
                job.error = exc
            self._drop_connection()
            return batch
        failed = False
        try:
            cursor = Lean(driver, "sqlite")
            for job in batch:
                try:
                    job.result = job.call(cursor)
                except Exception as exc:
                    job.error = exc
                    failed = True
        finally:
            try:
                driver.execute("ROLLBACK")
            except Exception:
                failed = True
        if failed:  # whatever state a failure left it in, the next batch starts on a fresh one
            self._drop_connection()
        return batch

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
