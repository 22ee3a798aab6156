"""Storage that is full: told apart from other failures, answered plainly, reported by health.

A write that fails for lack of space — the disk (ENOSPC, a quota), SQLite's SQLITE_FULL
("database or disk is full"), PostgreSQL's disk_full — raises `StorageFull`: nothing of it
was stored, and front-ends say so instead of failing with a generic error. `Space` remembers
that writes fail so, for `/healthz`, until one succeeds again or a probe finds room.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.logs import get_logger

log = get_logger(__name__)

SQLITE_FULL: Final = 13
POSTGRES_DISK_FULL: Final = "53100"
# What a probe writes to see whether there is room again: a few pages, as a small write needs.
PROBE_BYTES: Final = 64 * 1024
_NO_SPACE: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
RECHECK_SECONDS: Final = 30.0


class StorageFull(RuntimeError):
    """A write failed for lack of space; nothing of the work that raised it was stored."""


def is_storage_full(exc: BaseException) -> bool:
    """Whether `exc`, or what it was raised from, says there is no space to write."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StorageFull):
            return True
        if isinstance(current, OSError) and current.errno in _NO_SPACE:
            return True
        if isinstance(current, sqlite3.Error) and (
            getattr(current, "sqlite_errorcode", None) == SQLITE_FULL
            or "database or disk is full" in str(current)
        ):
            return True
        if getattr(current, "sqlstate", None) == POSTGRES_DISK_FULL:  # asyncpg
            return True
        original = getattr(current, "orig", None)  # SQLAlchemy wraps the driver's error
        if isinstance(original, BaseException):
            current = original
        else:
            current = current.__cause__ or current.__context__
    return False


class Space:
    """Whether the store's writes fail for lack of space now.

    Marked by a write that failed so, cleared by the next that succeeds. An instance that says
    it is full is taken out of rotation and may get no write to clear it, so `available` looks
    again: it writes `PROBE_BYTES` into each folder the store writes in (`probe`: SQLite's
    archive folder, the sessions' folder), which may be on different disks; and where the
    archive is a server's (PostgreSQL), whose disk no probe here can see, it also lets the
    mark lapse only `RECHECK_SECONDS` after the last failure, and the next write tells again."""

    def __init__(self, *, server_archive: bool, clock: Clock = SYSTEM_CLOCK) -> None:
        self.server_archive = server_archive
        self.folders: list[Path] = []
        self.clock = clock
        self.full = False
        self.error = ""
        self._failed_at = 0.0
        self._failures = 0

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Around a write: one that fails for lack of space raises `StorageFull` (and marks
        the store full); one that succeeds clears the mark, unless a file write that followed
        its commit was refused for lack of space meanwhile (`failed` called in the block)."""
        failures = self._failures
        try:
            yield
        except Exception as exc:
            if not is_storage_full(exc):
                raise
            self.failed(exc)
            raise StorageFull(f"storage is full: {exc}") from exc
        if self._failures == failures:
            self.wrote()

    def failed(self, exc: BaseException) -> None:
        if not self.full:
            log.error("storage full: writes fail until space is freed", error=str(exc))
        self.full, self.error = True, str(exc)
        self._failed_at = self.clock.monotonic()
        self._failures += 1

    def wrote(self) -> None:
        if self.full:
            log.info("storage writable again")
            self.full, self.error = False, ""

    async def available(self) -> bool:
        if not self.full:
            return True
        for folder in self.folders:
            try:
                await asyncio.to_thread(_probe, folder)
            except OSError as exc:
                if exc.errno in _NO_SPACE:
                    return False
                raise
        if self.server_archive and self.clock.monotonic() - self._failed_at < RECHECK_SECONDS:
            return False
        self.wrote()
        return True

    def probe(self, folder: Path) -> None:
        """Look for room in `folder` too before saying there is room again."""
        if folder not in self.folders:
            self.folders.append(folder)


def _probe(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / ".space-probe"
    try:
        with path.open("wb") as file:
            file.write(b"\0" * PROBE_BYTES)
            file.flush()
            os.fsync(file.fileno())
    finally:
        path.unlink(missing_ok=True)
