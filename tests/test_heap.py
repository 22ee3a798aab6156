"""Once serving, the objects made while starting are out of the collector's sight, and the
youngest generation is collected less often: full collections stalled every request."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from gateway import heap


@pytest.fixture
def collector_restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("collector_restored")
def test_settle_freezes_what_starting_made_and_raises_the_thresholds() -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    heap.settle()
    # The modules, classes and settings made so far are frozen: a full collection no longer
    # walks them.
    assert gc.get_freeze_count() > 10_000
    assert gc.get_threshold() == heap.THRESHOLDS
    assert heap.THRESHOLDS[0] > 700  # CPython's default, under which collections came often


@pytest.mark.usefixtures("collector_restored")
def test_cycles_made_after_settling_are_still_collected() -> None:
    heap.settle()

    class Node:
        other: object = None

    made = []
    for _ in range(1000):
        first, second = Node(), Node()
        first.other, second.other = second, first
        made.append(weakref.ref(first))
    del first, second
    gc.collect()
    assert all(ref() is None for ref in made)  # every cycle found and freed
