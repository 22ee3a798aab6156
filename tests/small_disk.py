"""A real filesystem that fills up, for tests of a full disk: a small tmpfs (mounting needs
root; the tests skip without it; a fixture, `small_disk`, in conftest.py), and a way to fill
it to the last byte."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

DISK_BYTES = 8 * 1024 * 1024


def fill(folder: Path) -> Path:
    """Write zeros until the filesystem has not one byte left."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as file:
        for size in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    file.write(b"\0" * size)
    return filler


@contextlib.contextmanager
def mounted_small_disk(mount_point: Path) -> Iterator[Path]:
    """A tmpfs of `DISK_BYTES` at `mount_point` (made here) while in the block."""
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
