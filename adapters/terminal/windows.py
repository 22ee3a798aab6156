"""Window identity that outlives a closed terminal.

Each open window holds an exclusive lock on `<home>/windows/<hash>.lock`. A window that starts
takes over the hash of one that is gone (its lock is free: closed, crashed, killed), so a
confirmation left open by a window that died is asked again in the next one instead of
waiting out its time. Two windows open at once never share a hash.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from gateway.ids import InvalidHash, new_window_hash, validate_hash


@dataclass
class WindowClaim:
    window_hash: str
    fd: int
    adopted: bool  # the hash belonged to a window that is gone

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def claim_window(directory: Path) -> WindowClaim:
    """Hold a window hash for this process: a free one left by a closed window, or a new one."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    candidates = sorted(directory.glob("*.lock"), key=_mtime, reverse=True)
    for path in candidates:
        try:
            window_hash = validate_hash(path.stem, "window hash")
        except InvalidHash:
            continue
        fd = _try_lock(path)
        if fd is not None:
            os.utime(path)
            return WindowClaim(window_hash, fd, adopted=True)
    while True:
        window_hash = new_window_hash()
        fd = _try_lock(directory / f"{window_hash}.lock")
        if fd is not None:
            return WindowClaim(window_hash, fd, adopted=False)


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
