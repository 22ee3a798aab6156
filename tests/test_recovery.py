"""Taking up tasks that died with their process: from the archive's journals, in archive order,
once no live process holds them, with history.json caught up with the archive."""

from __future__ import annotations

from pathlib import Path

from clock import FakeClock

from gateway.events import Inbound, Origin
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.history_file import HistoryMessage

ANN = Origin("http", sender_id="ann", sender_name="Ann", window_hash="w1")


def settings_for(home: Path, instance: str) -> Settings:
    return Settings(home=home, instance_id=instance, _env_file=None)


async def test_a_task_left_by_another_instance_name_is_taken_up_at_start(
    tmp_path: Path,
) -> None:
    """The container came back under another host name: on SQLite there is one instance,
    so whatever the archive holds unfinished is its to take up."""
    clock = FakeClock()
    home = tmp_path / "home"
    old = await Runtime.start(settings_for(home, "old-host"), clock=clock)
    sub = await old.router.submit(Inbound(ANN, "cli-x", "!confirm go"))
    await old.router.wait(sub.task_hash, 10, until_prompt=True)
    await old.close()
    new = await Runtime.start(settings_for(home, "new-host"), clock=clock)
    try:
        assert await new.router.recover(at_start=True) == 1
        assert await new.router.recover() == 0  # taken up once
        await new.router.wait(sub.task_hash, 10, until_prompt=True)
        await new.router.answer("cli-x", sub.task_hash, ANN, approve=True)
        assert (await new.router.wait(sub.task_hash, 10)).reply == "approved: go"
    finally:
        await new.close()


async def test_tasks_come_back_in_archive_order_even_within_one_millisecond(
    tmp_path: Path,
) -> None:
    clock = FakeClock()  # time stands still: every task is submitted in the same millisecond
    home = tmp_path / "home"
    first = await Runtime.start(settings_for(home, "host"), clock=clock)
    subs = [await first.router.submit(Inbound(ANN, f"cli-{i}", "!confirm go")) for i in range(8)]
    for sub in subs:
        await first.router.wait(sub.task_hash, 10, until_prompt=True)
    await first.close()
    again = await Runtime.start(settings_for(home, "host"), clock=clock)
    try:
        assert await again.router.recover(at_start=True) == 8
        journals = [j.task_hash for j in await again.store.unfinished()]
        assert journals == [s.task_hash for s in subs]
    finally:
        await again.close()


async def test_history_json_is_caught_up_with_the_archive(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rt = await Runtime.start(settings_for(home, "host"))
    try:
        sub = await rt.router.submit(Inbound(ANN, "cli-h", "first"))
        await rt.router.wait(sub.task_hash, 10)
        files = rt.store.files("cli-h")
        archived = await rt.store.recent_messages("cli-h")
        # As if the process died between a commit and its line: the reply never got filed.
        files.history.replace(
            [HistoryMessage(m.role, m.content, m.send_at, m.sender, m.id) for m in archived[:1]]
        )
    finally:
        await rt.close()
    rt = await Runtime.start(settings_for(home, "host"))
    try:
        sub = await rt.router.submit(Inbound(ANN, "cli-h", "second"))
        await rt.router.wait(sub.task_hash, 10)
        archived = await rt.store.recent_messages("cli-h")
        history = rt.store.files("cli-h").history.read()
        assert [(m.id, m.content) for m in history] == [(m.id, m.content) for m in archived]
        assert [m.content for m in history] == ["first", "echo: first", "second", "echo: second"]
    finally:
        await rt.close()


async def test_a_reset_window_is_not_filled_again(tmp_path: Path) -> None:
    rt = await Runtime.start(settings_for(tmp_path / "home", "host"))
    try:
        sub = await rt.router.submit(Inbound(ANN, "cli-r", "before"))
        await rt.router.wait(sub.task_hash, 10)
        await rt.router.submit(Inbound(ANN, "cli-r", "/reset"))
        assert await rt.store.catch_up_history("cli-r") == 0  # empty on purpose
        sub = await rt.router.submit(Inbound(ANN, "cli-r", "after"))
        await rt.router.wait(sub.task_hash, 10)
        history = rt.store.files("cli-r").history.read()
        assert [m.content for m in history] == ["after", "echo: after"]
    finally:
        await rt.close()
