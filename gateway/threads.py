"""The gateway's own threads, named for the operating system too.

Python keeps a thread's name to itself; `top -H`, `ps -L` and `/proc/<pid>/task/*/comm` show
every thread of the process as "agenvoy". Named there as well, they show which of the store's
threads spends the CPU (`bench/http_load.py --threads` reads them so).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

PROCESS_PREFIX: Final = "agenvoy-"  # the process is agenvoy already
NATIVE_NAME_BYTES: Final = 15  # what Linux keeps of a thread's name


def native_name(name: str) -> str:
    """What the operating system is told: `name` without the process's prefix, cut to fit."""
    return name.removeprefix(PROCESS_PREFIX).encode("ascii", "replace")[:NATIVE_NAME_BYTES].decode()


def daemon_thread(target: Callable[[], None], name: str) -> threading.Thread:
    """A daemon thread (not started) running `target`, named `name` in Python and, on Linux,
    for the operating system (elsewhere the Python name only)."""

    def run() -> None:
        _tell_native_name(native_name(name))
        target()

    return threading.Thread(target=run, name=name, daemon=True)


def _tell_native_name(name: str) -> None:
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(name)
    except OSError:
        pass  # not Linux, or /proc not mounted: the name is only cosmetic
