"""The gateway's threads carry their names into the operating system's view of the process."""

from __future__ import annotations

import queue
import sys
import threading
from pathlib import Path

import pytest

from gateway.threads import daemon_thread, native_name


def test_the_native_name_drops_the_process_prefix_and_fits_linux() -> None:
    assert native_name("agenvoy-db-read-lean") == "db-read-lean"
    assert native_name("agenvoy-a-thread-with-a-long-name") == "a-thread-with-a"
    assert len(native_name("x" * 40).encode()) == 15


@pytest.mark.skipif(sys.platform != "linux", reason="thread names in /proc are Linux's")
def test_a_daemon_thread_is_named_in_proc() -> None:
    seen: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()

    def report() -> None:
        comm = Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text()
        seen.put((threading.current_thread().name, comm.strip()))

    thread = daemon_thread(report, "agenvoy-db-write")
    assert thread.daemon
    thread.start()
    thread.join(timeout=10)
    assert seen.get(timeout=10) == ("agenvoy-db-write", "db-write")
