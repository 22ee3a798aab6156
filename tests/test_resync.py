"""What the instance running a session reads before each task when several share the archive:
the session's journals and the history's side of the archive come from one statement that finds
what the two reads it replaced found, on both backends."""

from __future__ import annotations

from gateway.store.journals import JournalRecord
from gateway.store.sessions import SessionStore

SESSION = "chat-resync"


async def test_one_read_finds_the_journals_and_what_the_resync_compares(
    store: SessionStore,
) -> None:
    first = await store.append_message(SESSION, "user", "one", create_session=True)
    second = await store.append_message(SESSION, "user", "two")
    await store.append_message("chat-other", "user", "elsewhere", create_session=True)
    # Stored out of order: the read gives them in the order of their messages.
    steps = ({"kind": "tool", "name": "read_file"},)
    later = JournalRecord(
        "b" * 16, SESSION, {"platform": "http"}, "two", second.id, 2, 3, steps=steps
    )
    earlier = JournalRecord("a" * 16, SESSION, {}, "one", first.id, 1, 1, prompt={"q": 1})
    await store.insert_journal(later)
    await store.insert_journal(earlier)
    await store.insert_journal(JournalRecord("c" * 16, "chat-other", {}, "x", 99, 1, 1))

    journals, seen = await store.journals_and_resync_view(SESSION)
    assert journals == [earlier, later] == await store.unfinished(SESSION)
    assert seen.tail is not None and [m.id for m in seen.tail] == [first.id, second.id]
    assert seen.archived_ids == (first.id, second.id)
    # The same as the resync's own read, which it hands on.
    assert await store.resync_history(SESSION, seen) == 0
    assert await store.resync_history(SESSION) == 0

    # Nothing stored for a session, and no folder: no journals, no history to compare.
    journals, seen = await store.journals_and_resync_view("chat-none")
    assert (journals, seen.tail, seen.archived_ids) == ([], None, ())


async def test_a_line_missing_from_history_is_filed_from_the_view(store: SessionStore) -> None:
    """Another instance archived a message this one has no line of: the view shows the id,
    and the resync files its line."""
    first = await store.append_message(SESSION, "user", "mine", create_session=True)
    elsewhere = await store.append_message(SESSION, "user", "theirs", write_history=False)
    mine = await store.append_message(SESSION, "assistant", "reply")
    journals, seen = await store.journals_and_resync_view(SESSION)
    assert journals == []
    assert seen.archived_ids == (first.id, elsewhere.id, mine.id)
    assert await store.resync_history(SESSION, seen) == 1
    lines = store.files(SESSION).history.read()
    assert [m.content for m in lines] == ["mine", "theirs", "reply"]
