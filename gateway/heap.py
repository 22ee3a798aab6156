"""The garbage collector's settings for a long-running server.

CPython's cyclic collector walks every tracked object of a generation when it collects it. A
gateway that has started holds a few hundred thousand long-lived objects (modules, SQLAlchemy's
mappings, the settings, the routes): each full collection walked all of them again, and under
load one came every second or two and held every request for 50 to 110 ms (the p99 of
`POST /v1/send`). Once serving, those objects are moved out of the collector's sight
(`gc.freeze`), so each collection looks only at what was made since. Garbage is still
collected: cycles made while serving are found as before.

The thresholds stay CPython's. A youngest generation of 20,000 objects (tried: rarer
collections) made each of its collections a pause of 10 to 50 ms, for the libraries' cycles
(an HTTP client's response and its stream, a retry's state) pile up between them: the slowest
1% of Telegram messages at 40 a second waited behind one. At 700 a pause is well under a
millisecond, and the messages per second the gateway serves did not change.

Below the interpreter, glibc's allocator keeps what threads freed in arenas of their own (one
per thread that allocates, up to eight per core) and gives pages back only from the top of an
arena. A gateway's database and file threads free in the middle of theirs, so the process's
resident memory crept up by a megabyte or two per 10,000 messages long after its caches had
filled. `give_back` asks the allocator to return every free page; a job calls it now and then.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable
from typing import Final

# Allocations (less deallocations) between collections of the youngest generation, and how
# many collections of one generation make one of the next: CPython's defaults, set again in
# case a library changed them, as the pause of a collection grows with the first.
THRESHOLDS: Final = (700, 10, 10)
# How often free pages go back to the system. A call walks the allocator's free lists (0.05 ms
# in a fresh process here) on a worker thread.
GIVE_BACK_SECONDS: Final = 10.0


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (musl, macOS)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim  # type: ignore[no-any-return]


_TRIM = _malloc_trim()


def settle() -> None:
    """Collect what starting left behind, then keep the survivors out of later collections."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


def give_back() -> bool:
    """Return the allocator's free pages to the system (blocking: call it from a thread);
    whether any were returned. Nothing to do on a C library without `malloc_trim`."""
    return _TRIM is not None and _TRIM(0) == 1
