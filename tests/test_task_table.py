"""The tasks a process keeps in memory: finished ones are kept for late readers, but only the
newest keep their events, so memory does not grow with every reply streamed."""

from __future__ import annotations

import pytest
from engine_rig import Engine

from gateway.engine.journal import JournalHead, Replay
from gateway.engine.tasks import TaskTable
from gateway.events import Origin, TextEvent

pytestmark = pytest.mark.fast

ANN = Origin("http", sender_id="ann", sender_name="Ann", window_hash="w1")


async def test_only_the_newest_finished_tasks_keep_their_events(engine: Engine) -> None:
    table = TaskTable(engine.store, keep=5, keep_events=2)
    hashes = []
    for n in range(4):
        head = JournalHead("cli-t", f"{n:016x}", ANN, f"message {n}", n + 1, 0, 0)
        task = table.add(head, (), Replay())
        await task.add_event(TextEvent(session_id="cli-t", text=f"reply {n}"))
        await task.state.update(status="done", reply=f"reply {n}")
        table.ended(task)
        hashes.append(task.task_hash)
    views = [table.get(h).view() for h in hashes]
    assert [len(v.events) for v in views] == [0, 0, 1, 1]
    # The outcome stays for every kept task, events or not.
    assert [v.reply for v in views] == [f"reply {n}" for n in range(4)]
