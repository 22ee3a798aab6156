"""Once serving, the objects made while starting are out of the collector's sight (full
collections stalled every request), and the youngest generation stays small (each of its
collections is a pause)."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_rig import Engine

from gateway import heap
from gateway.events import Inbound, Origin


@pytest.fixture
def collector_restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("collector_restored")
def test_settle_freezes_what_starting_made_and_keeps_young_collections_short() -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    heap.settle()
    # The modules, classes and settings made so far are frozen: a full collection no longer
    # walks them.
    assert gc.get_freeze_count() > 10_000
    assert gc.get_threshold() == heap.THRESHOLDS
    # At 20,000 a collection of the youngest generation walked that many objects, a pause of
    # 10 to 50 ms in the middle of a message: the p99 of a platform message at light load.
    assert heap.THRESHOLDS[0] <= 1000


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


@pytest.mark.usefixtures("collector_restored")
async def test_a_finished_run_leaves_nothing_for_the_collector(engine: Engine) -> None:
    """A task's run (its context, summary and window, its profile's choice) goes when it
    ends, by reference counts alone: what waits for a full collection (rare once settled)
    stays in memory until then, and grew the gateway's RSS with every session's summary."""
    ann = Origin("http", sender_id="ann", sender_name="Ann")
    first = await engine.router.submit(Inbound(ann, "chat-warm", "hello"))
    await engine.router.wait(first.task_hash, 10)  # what the first task sets up stays
    gc.collect()
    gc.disable()
    try:
        for n in range(5):
            submitted = await engine.router.submit(Inbound(ann, f"chat-{n % 2}", f"hello {n}"))
            assert (await engine.router.wait(submitted.task_hash, 10)).status == "done"
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = sorted({type(o).__qualname__ for o in gc.garbage if _ours(o)})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert ours == []


def _ours(obj: object) -> bool:
    return type(obj).__module__.startswith(("gateway.", "adapters."))


def _resident_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_give_back_returns_what_a_thread_freed_in_the_middle_of_its_arena() -> None:
    """64 MB freed by a thread below a block it keeps stay resident until given back."""
    if heap._TRIM is None:
        pytest.skip("this C library has no malloc_trim")
    kept: list[bytes] = []

    def churn() -> None:
        blocks = [bytes(4000) for _ in range(16_000)]  # above pymalloc's limit: malloc's
        kept.append(bytes(4000))  # above them all: the arena's top cannot shrink
        del blocks

    thread = threading.Thread(target=churn)
    thread.start()
    thread.join()
    before = _resident_mb()
    assert heap.give_back()
    assert before - _resident_mb() > 32
    assert kept


def test_give_back_is_a_no_op_without_malloc_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_TRIM", None)
    assert heap.give_back() is False
