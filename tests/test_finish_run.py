"""What a finished run leaves in the archive, the same on both backends: PostgreSQL records the
common run (no outbox entries, at most one usage row) as one statement, SQLite and every other
run as a transaction of several; these tests hold both to one outcome."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.store.journals import JournalRecord
from gateway.store.lean import Lean
from gateway.store.sessions import RunRecord, SessionStore
from gateway.store.usage import UsageRecord

SESSION = "cli-fin"


async def _rows(store: SessionStore, sql: str) -> list[tuple[Any, ...]]:
    return await store.db.read_lean(lambda lean: lean.all(sql))


async def _journaled(store: SessionStore, task_hash: str) -> None:
    """A task as intake leaves it: its journal, and an answer given to its first prompt."""
    await store.insert_journal(JournalRecord(task_hash, SESSION, {}, "hi", 1, 1, 1))

    def answer(sql: Lean) -> None:
        sql.run(
            "INSERT INTO prompt_answer (task_hash, number, session_id, answer, answered_at)"
            " VALUES (?, 1, ?, '{}', 1)",
            task_hash,
            SESSION,
        )

    await store.db.write_lean(answer)


async def _left_over(store: SessionStore, task_hash: str) -> list[tuple[Any, ...]]:
    journals = await _rows(
        store, f"SELECT task_hash FROM task_journal WHERE task_hash = '{task_hash}'"
    )
    answers = await _rows(
        store, f"SELECT task_hash FROM prompt_answer WHERE task_hash = '{task_hash}'"
    )
    return journals + answers


async def _updated_at(store: SessionStore) -> int:
    return int((await _rows(store, f"SELECT updated_at FROM session WHERE id = '{SESSION}'"))[0][0])


async def test_a_run_with_its_usage_is_recorded_once(store: SessionStore) -> None:
    await store.ensure(SESSION)
    await _journaled(store, "t1")
    before = await _updated_at(store)
    usage = UsageRecord(
        SESSION, "m1", input=3, output=5, cache_read=7, cache_write=11, elapsed_ms=13,
        tool_calls=["c1"], send_at=17, task_hash="t1", identity="http:ann", cost=0.25,
    )  # fmt: skip
    run = RunRecord(SESSION, "t1", "do it", "done\x00", [{"tool": "x"}], [usage], "http:ann")
    await store.finish_run(run, "done\x00", sender="agent")
    again = RunRecord(SESSION, "t1", "again", "other", usage=[usage], identity="http:ann")
    await store.finish_run(again, "other", sender="agent")

    assert await _rows(
        store, "SELECT objective, tool_results, reply, identity FROM action_history"
    ) == [("do it", '[{"tool": "x"}]', "done\ufffd", "http:ann")]
    assert await _rows(
        store,
        "SELECT session_id, model, input, output, cache_read, cache_write, elapsed_ms,"
        " tool_calls, send_at, task_hash, identity, cost FROM usage",
    ) == [(SESSION, "m1", 3, 5, 7, 11, 13, '["c1"]', 17, "t1", "http:ann", 0.25)]
    replies = await store.recent_messages(SESSION)
    assert [(m.role, m.content, m.sender, m.task_hash) for m in replies] == [
        ("assistant", "done\ufffd", "agent", "t1")
    ]
    assert [(m.id, m.content) for m in store.files(SESSION).history.read()] == [
        (replies[0].id, "done\ufffd")
    ]
    assert await _updated_at(store) >= max(before, replies[0].send_at)
    assert await _left_over(store, "t1") == []


async def test_a_run_without_a_reply_leaves_no_message(store: SessionStore) -> None:
    await store.ensure(SESSION)
    await _journaled(store, "t2")
    await store.finish_run(RunRecord(SESSION, "t2", "do it", ""), "", sender="agent")
    assert await _rows(store, "SELECT task_hash, reply FROM action_history") == [("t2", "")]
    assert await store.recent_messages(SESSION) == []
    assert await _rows(store, "SELECT count(*) FROM usage") == [(0,)]
    assert await _left_over(store, "t2") == []


async def test_a_run_with_several_usage_rows_keeps_each(store: SessionStore) -> None:
    await store.ensure(SESSION)
    calls = [UsageRecord(SESSION, model, output=n, task_hash="t3") for n, model in enumerate("ab")]
    await store.finish_run(RunRecord(SESSION, "t3", "x", "ok", usage=calls), "ok", sender="agent")
    await store.finish_run(RunRecord(SESSION, "t3", "x", "ok", usage=calls), "ok", sender="agent")
    assert await _rows(store, "SELECT model, output FROM usage ORDER BY model") == [
        ("a", 0),
        ("b", 1),
    ]
    assert [m.content for m in await store.recent_messages(SESSION)] == ["ok"]


async def test_lines_first_are_written_before_the_run_is_committed(store: SessionStore) -> None:
    """A run's action.log lines go in the record's own hand-off, ahead of its transaction:
    when they cannot be written, nothing of the run is; once they are, the run is."""
    await store.ensure(SESSION)
    await _journaled(store, "t3")
    run = RunRecord(SESSION, "t3", "do it", "done", identity="http:ann")

    def refused() -> None:
        raise OSError("no room for the lines")

    with pytest.raises(OSError, match="no room"):
        await store.finish_run(run, "done", sender="agent", lines_first=refused)
    assert await _rows(store, "SELECT reply FROM action_history") == []
    assert await store.recent_messages(SESSION) == []

    def lines() -> None:
        store.files(SESSION).action_log.append("assistant", "done", task_hash="t3")

    await store.finish_run(run, "done", sender="agent", lines_first=lines)
    assert [r.kind for r in store.files(SESSION).action_log.read()] == ["assistant"]
    assert await _rows(store, "SELECT reply FROM action_history") == [("done",)]
    assert await _left_over(store, "t3") == []
