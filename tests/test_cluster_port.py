"""The one-instance side of the cluster port (gateway/cluster/one.py), on the rig's store
and without a runtime: every session is this instance's, nothing is told to anyone."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from engine_rig import Engine

from gateway.cluster.followed import Followed
from gateway.cluster.one import SingleInstance, SoleOwner
from gateway.engine.journal import JournalHead, Replay
from gateway.engine.prompts import PromptNotFound, Reply
from gateway.engine.task import TaskState
from gateway.engine.tasks import TaskTable
from gateway.events import Origin
from gateway.store.journals import JournalRecord
from gateway.store.message_reads import StoredMessage
from gateway.store.sessions import SessionStore

pytestmark = pytest.mark.fast

ANN = Origin("http", sender_id="ann", sender_name="Ann", window_hash="w1")


@pytest.fixture
def store(engine: Engine) -> SessionStore:
    """The archive of the rig's engine; the parts under test are made here, beside its own."""
    return engine.store


async def stored_task(store: SessionStore, session_id: str, task_hash: str) -> JournalHead:
    """A message taken in with its task's journal, as the intake stores it."""
    heads: list[JournalHead] = []

    def journal(stored: StoredMessage) -> JournalRecord:
        heads.append(JournalHead(session_id, task_hash, ANN, "hi", stored.id, 0, 0))
        return heads[0].record()

    assert await store.take_in(session_id, "hi", sender="Ann", task_hash=task_hash, journal=journal)
    return heads[0]


async def test_a_sole_owner_runs_every_stored_task_here_until_it_stops(
    store: SessionStore,
) -> None:
    async def take_up(records: list[JournalRecord]) -> int:
        raise AssertionError("nothing to take up")

    owner = SoleOwner(store, take_up=take_up, is_live=bool)
    queued: list[str] = []

    def enqueue(name: str) -> Callable[[], int]:
        def place() -> int:  # its place in the queue: how many are ahead
            queued.append(name)
            return len(queued) - 1

        return place

    assert await owner.run_here("cli-a", enqueue("one")) == 0
    assert await owner.run_here("cli-a", enqueue("two")) == 1
    await owner.close(["cli-a"])
    # Stopping: the task stays in its journal for the next start, and is not queued here.
    assert await owner.run_here("cli-a", enqueue("three")) is None
    assert queued == ["one", "two"]


async def test_a_sole_owner_adopts_only_the_journals_not_live_here(store: SessionStore) -> None:
    live = await stored_task(store, "cli-a", "aaaaaaaaaaaaaaaa")
    left = await stored_task(store, "cli-a", "bbbbbbbbbbbbbbbb")
    await stored_task(store, "cli-b", "cccccccccccccccc")
    taken: list[str] = []

    async def take_up(records: list[JournalRecord]) -> int:
        taken.extend(r.task_hash for r in records)
        return len(records)

    owner = SoleOwner(store, take_up=take_up, is_live=lambda task: task == live.task_hash)
    assert await owner.adopt("cli-a") == 1
    assert taken == [left.task_hash]
    await owner.close([])
    assert await owner.adopt("cli-b") == 0  # stopping: left for the next start


async def test_a_single_instance_follows_only_the_tasks_it_was_handed(
    store: SessionStore,
) -> None:
    tasks = TaskTable(store)
    head = await stored_task(store, "cli-a", "dddddddddddddddd")
    task = tasks.add(head, (), Replay())
    alone = SingleInstance()
    assert await alone.follow(head.task_hash) is None  # it runs here: the task table has it
    # Stored while the gateway was stopping: the next start runs it; meanwhile it is followed.
    alone.watch(tasks.drop(task))
    assert head.task_hash not in tasks
    assert await alone.follow(head.task_hash) is task.state
    assert alone.release(head.task_hash) is task.state
    assert await alone.follow(head.task_hash) is None
    assert await alone.follow("eeeeeeeeeeeeeeee") is None
    assert await alone.prompts() == []
    with pytest.raises(PromptNotFound):
        await alone.answer("cli-a", "eeeeeeeeeeeeeeee", ANN, Reply(approve=True))


async def test_followed_tasks_are_bounded_but_one_still_going_is_kept() -> None:
    followed = Followed(keep=2)
    states = [TaskState("cli-a", f"{n:016x}", ANN, f"message {n}") for n in range(3)]
    for state in states:
        followed.add(state)
    # Past the bound, but the oldest has not finished: nothing is dropped.
    assert all(followed.find(s.task_hash) is s for s in states)
    await states[0].update(status="done")
    followed.add(TaskState("cli-a", "ffffffffffffffff", ANN, "newest"))
    assert followed.find(states[0].task_hash) is None  # finished, and the oldest: gone
    # The next oldest is still going: it stays, and so does everything newer.
    assert followed.find(states[1].task_hash) is states[1]
    assert followed.find("ffffffffffffffff") is not None
