"""Time in one unit everywhere: Unix milliseconds."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
