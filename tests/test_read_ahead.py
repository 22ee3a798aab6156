"""Where a task's context starts, read with its session's journals just before the task (one
round trip less per message on PostgreSQL): what the context read then takes is what it would
have read itself, a change made in between is not hidden by it, and it is used once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clock import FakeClock

from gateway.settings import Settings
from gateway.store.files import Summary
from gateway.store.read_ahead import MAX_AGE_SECONDS, MAX_HELD, ReadAhead
from gateway.store.sessions import SessionStore

SID = "cli-ahead"
WINDOW = 4


async def test_a_read_is_taken_once_for_its_window_while_fresh() -> None:
    clock = FakeClock()
    ahead = ReadAhead[str](clock)
    ahead.put(SID, WINDOW, "read")
    assert ahead.take(SID, WINDOW + 1) is None  # another window: read it again
    assert ahead.take(SID, WINDOW) is None  # and the mismatch dropped it
    ahead.put(SID, WINDOW, "read")
    assert ahead.take(SID, WINDOW) == "read"
    assert ahead.take(SID, WINDOW) is None  # once
    ahead.put(SID, WINDOW, "read")
    await clock.advance(MAX_AGE_SECONDS + 0.01)
    assert ahead.take(SID, WINDOW) is None  # too old
    ahead.put(SID, WINDOW, "read")
    ahead.forget(SID)
    assert ahead.take(SID, WINDOW) is None
    for n in range(MAX_HELD + 1):
        ahead.put(f"cli-{n}", WINDOW, "never asked for")
    assert len(ahead._held) <= MAX_HELD


@pytest.fixture
async def store(database_url: str, tmp_path: Path) -> AsyncIterator[SessionStore]:
    settings = Settings(
        home=tmp_path / "home", database_url=database_url, history_window=WINDOW, _env_file=None
    )
    opened = await SessionStore.open(settings)
    try:
        for n in range(WINDOW + 3):
            await opened.take_in(SID, f"message {n}", sender="u")
        yield opened
    finally:
        await opened.close()


async def test_the_context_read_takes_what_was_read_with_the_journals(
    store: SessionStore,
) -> None:
    await store.save_summary(SID, Summary("older ones", 1, 1000))
    read_itself = await store.context_read(SID, WINDOW, tail=10)

    await store.journals_and_resync_view(SID)
    assert SID in store.positions_ahead._held
    taken = await store.context_read(SID, WINDOW, tail=10)

    assert taken == read_itself
    assert (taken.summary, taken.due) == (Summary("older ones", 1, 1000), 2)
    assert taken.settings is not None
    assert SID not in store.positions_ahead._held  # used once


async def test_a_change_made_after_the_journals_read_is_seen(store: SessionStore) -> None:
    await store.journals_and_resync_view(SID)
    await store.update(SID, model="another-model")
    assert (await store.context_read(SID, WINDOW)).settings.model == "another-model"  # type: ignore[union-attr]

    await store.journals_and_resync_view(SID)
    await store.save_summary(SID, Summary("folded", 3, 2000))
    read = await store.context_read(SID, WINDOW)
    assert (read.summary, read.due) == (Summary("folded", 3, 2000), 0)

    await store.journals_and_resync_view(SID)
    await store.set_tool_allowed(SID, "web_fetch", True)
    settings = (await store.context_read(SID, WINDOW)).settings
    assert settings is not None and "web_fetch" in settings.settings
