"""The per-message writes PostgreSQL runs as one statement each (gateway/store/pg_writes.py):
run twice, as after a connection cut under the first run, they do what they do once."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.store import pg_writes
from gateway.store.journals import JournalRecord
from gateway.store.message_reads import StoredMessage
from gateway.store.sessions import SessionStore

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

SESSION = "cli-once"


def _message(task_hash: str, at: int = 1_000) -> tuple[StoredMessage, JournalRecord]:
    message = StoredMessage(0, SESSION, "user", "hi", "Ann", at, task_hash, "http:ann")
    return message, JournalRecord(task_hash, SESSION, {"platform": "http"}, "hi", 0, at, at + 1)


async def _rows(store: SessionStore, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return await store.db.read_lean(lambda lean: lean.all(sql, *params))


async def test_a_message_taken_in_twice_is_archived_and_journaled_once(
    store: SessionStore,
) -> None:
    await store.ensure(SESSION)
    message, journal = _message("a" * 32)
    statement, params = pg_writes.take_in(message, "", journal)
    first = await store.db.write_one(statement, *params, repeatable=True)
    again = await store.db.write_one(statement, *params, repeatable=True)
    message_id = first[0][1]
    assert first == again == [(True, message_id)]
    assert await _rows(store, "SELECT id, content, sender_key FROM messages") == [
        (message_id, "hi", "http:ann")
    ]
    journals = "SELECT task_hash, user_message_id, user_sent_at, submitted_at FROM task_journal"
    assert await _rows(store, journals) == [("a" * 32, message_id, 1_000, 1_001)]


async def test_a_message_to_a_session_without_a_row_writes_nothing(store: SessionStore) -> None:
    message, journal = _message("b" * 32)
    statement, params = pg_writes.take_in(message, "", journal)
    assert await store.db.write_one(statement, *params, repeatable=True) == [(False, None)]
    assert await _rows(store, "SELECT count(*) FROM messages") == [(0,)]
    assert await _rows(store, "SELECT count(*) FROM task_journal") == [(0,)]
    # Through the store, the transaction makes the session and takes the message in.
    stored = await store.take_in(
        SESSION, "hi", sender="Ann", task_hash="b" * 32, journal=lambda m: journal
    )
    assert stored is not None
    assert await _rows(store, "SELECT id FROM session") == [(SESSION,)]


async def test_a_delivery_seen_before_starts_no_second_task(store: SessionStore) -> None:
    await store.ensure(SESSION)
    first, first_journal = _message("c" * 32)
    statement, params = pg_writes.take_in(first, "telegram:1:7", first_journal)
    [(found, message_id)] = await store.db.write_one(statement, *params, repeatable=True)
    assert found and message_id is not None
    repeat, repeat_journal = _message("d" * 32)
    statement, params = pg_writes.take_in(repeat, "telegram:1:7", repeat_journal)
    assert await store.db.write_one(statement, *params, repeatable=True) == [(True, None)]
    assert await _rows(store, "SELECT count(*) FROM messages") == [(1,)]
    assert await _rows(store, "SELECT task_hash FROM task_journal") == [("c" * 32,)]
