"""One gateway per home, and one per SQLite database: a second `agenvoy run` on either is
refused.

Two gateways on one home, or on one SQLite database, would both take up the same unfinished
tasks and run their tools twice (several instances share a PostgreSQL database, where leases
keep them apart: README, "Several instances"). The running one holds an exclusive lock on a
file next to what it guards for its whole life; the lock goes with the process, however it
ends, so a crash leaves nothing to clean up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_NAME = "gateway.lock"


class HomeInUse(RuntimeError):
    def __init__(self, home: Path, holder: str) -> None:
        held = f" (pid {holder})" if holder else ""
        super().__init__(
            f"another gateway{held} is running with AGENVOY_HOME={home}: stop it, or give "
            "this one a home of its own (AGENVOY_HOME); several instances share a PostgreSQL "
            "database (AGENVOY_DATABASE_URL), never a home"
        )
        self.home = home


class DatabaseInUse(HomeInUse):
    def __init__(self, path: Path, holder: str) -> None:
        held = f" (pid {holder})" if holder else ""
        RuntimeError.__init__(
            self,
            f"another gateway{held} is running on the SQLite database {path}: SQLite serves "
            "one instance. To run several, set AGENVOY_DATABASE_URL=postgresql://… and "
            'AGENVOY_KV_URL=redis://… for all of them (README, "Several instances")',
        )
        self.home = path


@contextlib.contextmanager
def home_lock(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _exclusive(home / LOCK_NAME, lambda holder: HomeInUse(home, holder)):
        yield


@contextlib.contextmanager
def database_lock(database_url: str) -> Iterator[None]:
    """For a SQLite database file, hold `<file>.lock`; other databases are left to leases."""
    path = sqlite_path(database_url)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = path.with_name(path.name + ".lock")
    with _exclusive(lock, lambda holder: DatabaseInUse(path, holder)):
        yield


def sqlite_path(database_url: str) -> Path | None:
    scheme, _, rest = database_url.partition("://")
    if not scheme.lower().startswith("sqlite"):
        return None
    # sqlite:///relative.db and sqlite:////absolute.db: the first slash ends the (empty) host.
    name = rest.partition("?")[0][1:]
    if not name or name == ":memory:":
        return None
    return Path(name).expanduser().resolve()


@contextlib.contextmanager
def _exclusive(path: Path, refused: Callable[[str], Exception]) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise refused(holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
