"""The rolling summary lives in the archive: two instances (two homes, one PostgreSQL
database) see the same summary and cursor, and a /reset given on one empties the window of
the other before its next task."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import Backends

from gateway.settings import Settings
from gateway.store.files import Summary
from gateway.store.sessions import SessionStore


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[SessionStore, SessionStore]]:
    backends = Backends(postgres=True)
    try:
        url = (await backends.new())["AGENVOY_DATABASE_URL"]  # skips (or fails in CI) without it
        stores = [
            await SessionStore.open(
                Settings(home=tmp_path / name, database_url=url, _env_file=None)
            )
            for name in ("one", "two")
        ]
        try:
            yield stores[0], stores[1]
        finally:
            for store in stores:
                await store.close()
    finally:
        await backends.drop()


async def test_a_summary_written_on_one_instance_is_read_on_another(
    pair: tuple[SessionStore, SessionStore],
) -> None:
    one, two = pair
    await one.ensure("chat-s")
    first = await one.append_message("chat-s", "user", "hello")
    await one.save_summary("chat-s", Summary("they said hello", first.id, 5))
    await two.ensure("chat-s")
    assert await two.summary("chat-s") == Summary("they said hello", first.id, 5)
    # The folder copy follows on the instance that wrote it.
    assert one.files("chat-s").read_summary() == Summary("they said hello", first.id, 5)


async def test_a_reset_on_one_instance_empties_the_window_on_the_other(
    pair: tuple[SessionStore, SessionStore],
) -> None:
    one, two = pair
    await two.ensure("chat-r")
    for text in ("old one", "old two"):
        await two.append_message("chat-r", "user", text)
    assert [m.content for m in two.files("chat-r").history.read()] == ["old one", "old two"]
    await one.ensure("chat-r")
    await one.reset_conversation("chat-r", await one.last_message_id("chat-r"), 9)
    await one.append_message("chat-r", "user", "after the reset")
    # The instance that runs the session next brings its history.json in line.
    await two.resync_history("chat-r")
    assert [m.content for m in two.files("chat-r").history.read()] == ["after the reset"]
    state = await two.summary_state("chat-r")
    assert state is not None and state.summary.text == ""


async def test_a_summary_kept_only_in_files_moves_into_the_archive(
    pair: tuple[SessionStore, SessionStore],
) -> None:
    one, two = pair
    await one.ensure("chat-l")
    one.files("chat-l").write_summary(Summary("from before the archive had it", 3, 7))
    assert await one.summary("chat-l") == Summary("from before the archive had it", 3, 7)
    # Read once, it is the archive's: the other instance (no such file there) sees it too.
    await two.ensure("chat-l")
    assert await two.summary("chat-l") == Summary("from before the archive had it", 3, 7)
    # A session with no summary anywhere reads as none, and keeps doing so.
    await one.ensure("chat-n")
    assert await one.summary("chat-n") is None
    assert await two.summary("chat-n") is None
