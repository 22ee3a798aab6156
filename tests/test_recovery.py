"""Taking up tasks that died with their process: from the archive's journals, in archive order,
once no live process holds them, with history.json caught up with the archive."""

from __future__ import annotations

import pytest
from clock import FakeClock
from engine_rig import EngineRig

from gateway.events import Inbound, Origin
from gateway.store.history_file import HistoryMessage

pytestmark = pytest.mark.fast

ANN = Origin("http", sender_id="ann", sender_name="Ann", window_hash="w1")


async def test_a_task_left_by_another_instance_name_is_taken_up_at_start(
    engines: EngineRig,
) -> None:
    """The container came back under another host name: on SQLite there is one instance,
    so whatever the archive holds unfinished is its to take up."""
    async with engines.open(instance_id="old-host") as old:
        sub = await old.router.submit(Inbound(ANN, "cli-x", "!confirm go"))
        await old.router.wait(sub.task_hash, 10, until_prompt=True)
    async with engines.open(instance_id="new-host") as new:
        assert await new.router.recover(at_start=True) == 1
        assert await new.router.recover() == 0  # taken up once
        await new.router.wait(sub.task_hash, 10, until_prompt=True)
        await new.router.answer("cli-x", sub.task_hash, ANN, approve=True)
        assert (await new.router.wait(sub.task_hash, 10)).reply == "approved: go"


async def test_tasks_come_back_in_archive_order_even_within_one_millisecond(
    engines: EngineRig,
) -> None:
    # The rig's clock stands still: every task is submitted in the same millisecond.
    async with engines.open(instance_id="host") as first:
        subs = [
            await first.router.submit(Inbound(ANN, f"cli-{i}", "!confirm go")) for i in range(8)
        ]
        for sub in subs:
            await first.router.wait(sub.task_hash, 10, until_prompt=True)
    async with engines.open(instance_id="host") as again:
        assert await again.router.recover(at_start=True) == 8
        journals = [j.task_hash for j in await again.store.unfinished()]
        assert journals == [s.task_hash for s in subs]


async def test_history_json_is_caught_up_with_the_archive(engines: EngineRig) -> None:
    async with engines.open(instance_id="host") as engine:
        sub = await engine.router.submit(Inbound(ANN, "cli-h", "first"))
        await engine.router.wait(sub.task_hash, 10)
        files = engine.store.files("cli-h")
        archived = await engine.store.recent_messages("cli-h")
        # As if the process died between a commit and its line: the reply never got filed.
        files.history.replace(
            [HistoryMessage(m.role, m.content, m.send_at, m.sender, m.id) for m in archived[:1]]
        )
    async with engines.open(instance_id="host") as engine:
        sub = await engine.router.submit(Inbound(ANN, "cli-h", "second"))
        await engine.router.wait(sub.task_hash, 10)
        archived = await engine.store.recent_messages("cli-h")
        history = engine.store.files("cli-h").history.read()
        assert [(m.id, m.content) for m in history] == [(m.id, m.content) for m in archived]
        assert [m.content for m in history] == ["first", "echo: first", "second", "echo: second"]


async def test_a_reset_window_is_not_filled_again(engines: EngineRig) -> None:
    async with engines.open(instance_id="host") as engine:
        sub = await engine.router.submit(Inbound(ANN, "cli-r", "before"))
        await engine.router.wait(sub.task_hash, 10)
        await engine.router.submit(Inbound(ANN, "cli-r", "/reset"))
        assert await engine.store.catch_up_history("cli-r") == 0  # empty on purpose
        sub = await engine.router.submit(Inbound(ANN, "cli-r", "after"))
        await engine.router.wait(sub.task_hash, 10)
        history = engine.store.files("cli-r").history.read()
        assert [m.content for m in history] == ["after", "echo: after"]


async def test_a_look_now_and_again_leaves_a_journal_stored_a_moment_ago_to_its_receiver(
    engines: EngineRig, clock: FakeClock
) -> None:
    """Another instance may be queuing a task it stored a moment ago: the periodic look waits
    until the journal has settled, then takes it up if it is still nobody's."""
    async with engines.open(instance_id="receiver") as receiver:
        sub = await receiver.router.submit(Inbound(ANN, "cli-s", "!confirm go"))
        await receiver.router.wait(sub.task_hash, 10, until_prompt=True)
    async with engines.open(instance_id="looker") as looker:
        assert await looker.router.recover(settled_for=5) == 0
        assert not looker.router.is_busy("cli-s")
        await clock.advance(5)
        assert await looker.router.recover(settled_for=5) == 1
        await looker.router.wait(sub.task_hash, 10, until_prompt=True)
        await looker.router.answer("cli-s", sub.task_hash, ANN, approve=True)
        assert (await looker.router.wait(sub.task_hash, 10)).reply == "approved: go"
