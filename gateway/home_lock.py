"""One gateway per home: a second `agenvoy run` on the same `AGENVOY_HOME` is refused.

Two gateways on one home would both take up the same unfinished tasks and run their tools
twice. The running one holds an exclusive lock on `<home>/gateway.lock` for its whole life;
the lock goes with the process, however it ends, so a crash leaves nothing to clean up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

LOCK_NAME = "gateway.lock"


class HomeInUse(RuntimeError):
    def __init__(self, home: Path, holder: str) -> None:
        held = f" (pid {holder})" if holder else ""
        super().__init__(
            f"another gateway{held} is running with AGENVOY_HOME={home}: stop it, or give "
            "this one a home of its own (AGENVOY_HOME)"
        )
        self.home = home


@contextlib.contextmanager
def home_lock(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise HomeInUse(home, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
