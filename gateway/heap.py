"""The garbage collector's settings for a long-running server.

CPython's cyclic collector walks every tracked object of a generation when it collects it. A
gateway that has started holds a few hundred thousand long-lived objects (modules, SQLAlchemy's
mappings, the settings, the routes): each full collection walked all of them again, and under
load one came every second or two and held every request for 50 to 110 ms (the p99 of
`POST /v1/send`). Once serving, those objects are moved out of the collector's sight
(`gc.freeze`) and the youngest generation is collected after more allocations, so collections
are rarer and each looks only at what was made since. Garbage is still collected: cycles made
while serving are found as before, only in larger, less frequent steps.
"""

from __future__ import annotations

import gc
from typing import Final

# Allocations (less deallocations) between collections of the youngest generation, and how
# many collections of one generation make one of the next. CPython's defaults: 700, 10, 10.
THRESHOLDS: Final = (20_000, 20, 20)


def settle() -> None:
    """Collect what starting left behind, then keep the survivors out of later collections."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
