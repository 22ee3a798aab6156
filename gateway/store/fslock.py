"""Small filesystem primitives shared by the session files: locks and atomic replacement."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


class SessionDirectoryMissing(FileNotFoundError):
    """The session directory is gone; a late write must not bring it back."""


@contextlib.contextmanager
def dir_lock(directory: Path) -> Iterator[None]:
    """Exclusive lock on a session directory, held across processes and threads.

    flock on the directory itself needs no extra lock file, and since each call opens its own
    descriptor, two threads of one process exclude each other just as two processes do.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError as exc:
        raise SessionDirectoryMissing(str(directory)) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data` so readers see the old or the new file, never a mix.

    With `durable`, the new file is on disk when this returns. Without, a crash may leave the
    old one (or, after a power cut, an empty one): for copies of what the archive keeps,
    which are rewritten from it, the fsyncs cost more than they protect.
    The parent directory must exist: it is never created here.
    """
    if not path.parent.is_dir():
        raise SessionDirectoryMissing(str(path.parent))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
