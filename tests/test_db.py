from __future__ import annotations

import asyncio
import gc
import itertools
import json
import shutil
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conftest import _pg_database as pg_database
from conftest import _pg_drop as pg_drop
from sqlalchemy import text
from sqlmodel import Session
from store_rows import SESSION_TABLES, populate, rows_of
from structlog.testing import capture_logs
from support import head_revision

from gateway.settings import Settings
from gateway.store.db import Database, DatabaseError
from gateway.store.sessions import RunRecord, SessionStore, UnknownSession
from gateway.store.usage import DAY_MS, UsageRecord

HOSTILE_QUERIES = [
    '"',
    '""',
    "'",
    "*",
    "fox*",
    "NEAR",
    "NEAR(fox dog)",
    "fox NEAR dog",
    "(",
    "((fox",
    "fox)",
    "AND",
    "OR OR",
    "NOT fox",
    "content:fox",
    "^fox",
    "fox -dog",
    "%",
    "_",
    "\\",
    "'; DROP TABLE messages; --",
    "{fox dog}",
    "\x00",
    "😀",
]
# Tests that only search the archive share one seeded per backend (the `seeded` fixture).
SEARCH_ONLY = pytest.mark.asyncio(loop_scope="module")


async def seed(store: SessionStore) -> None:
    await store.ensure("cli-en")
    await store.ensure("tg--42")
    await store.append_message("cli-en", "user", "The quick brown fox jumps", sender="ann")
    await store.append_message("cli-en", "assistant", "over the lazy dog", sender="agent")
    await store.append_message("tg--42", "user", "我们明天在東京見面吧", sender="李")
    await store.append_message("tg--42", "user", "Foxes are NEAR (the river) * 50%", sender="bo")


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["sqlite", "postgresql"])
async def seeded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SessionStore]:
    """One seeded archive per backend for the searches below, which only read it: seeding a
    fresh database for each of them cost most of this file's time."""
    home = tmp_path_factory.mktemp("seeded")
    pg_name = None
    if request.param == "sqlite":
        url = f"sqlite:///{home / 'store' / 'history.db'}"
    else:
        url, pg_name = await pg_database()
    store = await SessionStore.open(Settings(home=home, database_url=url, _env_file=None))
    try:
        await seed(store)
        yield store
    finally:
        await store.close()
        if pg_name is not None:
            await pg_drop(pg_name)


@SEARCH_ONLY
async def test_fts_finds_english_words(seeded: SessionStore) -> None:
    hits = await seeded.search.messages("quick fox")
    assert [h.content for h in hits] == ["The quick brown fox jumps"]
    hits = await seeded.search.messages("FOX")  # case-insensitive, substring
    assert [h.session_id for h in hits] == ["tg--42", "cli-en"]  # newest first
    hits = await seeded.search.messages("fox", session_id="cli-en")
    assert [h.sender for h in hits] == ["ann"]
    assert await seeded.search.messages("giraffe") == []


@SEARCH_ONLY
async def test_fts_finds_cjk_substrings(seeded: SessionStore) -> None:
    for query in ("東京", "明天在", "東京見面", "在東京"):
        hits = await seeded.search.messages(query)
        assert [h.content for h in hits] == ["我们明天在東京見面吧"], query
    assert await seeded.search.messages("東京 fox") == []


@SEARCH_ONLY
@pytest.mark.parametrize("query", HOSTILE_QUERIES)
async def test_hostile_queries_never_raise(seeded: SessionStore, query: str) -> None:
    hits = await seeded.search.messages(query)
    assert isinstance(hits, list)
    for hit in hits:
        assert all(term.lower() in hit.content.lower() for term in query.split())
    # Whatever the query was, the archive it ran against is intact for the next one.
    assert [len(await seeded.recent_messages(sid)) for sid in ("cli-en", "tg--42")] == [2, 2]


@SEARCH_ONLY
async def test_hostile_query_matches_literally(seeded: SessionStore) -> None:
    assert [h.sender for h in await seeded.search.messages("NEAR (the")] == ["bo"]
    assert [h.sender for h in await seeded.search.messages("50%")] == ["bo"]
    assert await seeded.search.messages("5_%") == []
    assert [h.sender for h in await seeded.search.messages("*")] == ["bo"]


async def test_search_pages_newest_first(store: SessionStore) -> None:
    await store.ensure("cli-p")
    for i in range(25):
        await store.append_message("cli-p", "user", f"needle number {i}")
    first = await store.search.messages("needle", limit=10)
    second = await store.search.messages("needle", limit=10, offset=10)
    assert [h.content for h in first] == [f"needle number {i}" for i in range(24, 14, -1)]
    assert [h.content for h in second] == [f"needle number {i}" for i in range(14, 4, -1)]


async def test_messages_and_history_file_agree(store: SessionStore) -> None:
    await store.ensure("dc-7", name="general")
    stored = [await store.append_message("dc-7", "user", f"m{i}", sender=f"s{i}") for i in range(5)]
    assert [m.id for m in stored] == sorted(m.id for m in stored)
    recent = await store.recent_messages("dc-7", limit=3)
    assert [m.content for m in recent] == ["m2", "m3", "m4"]
    in_file = store.files("dc-7").history.read()
    assert [(m.content, m.sender, m.send_at) for m in in_file] == [
        (m.content, m.sender, m.send_at) for m in stored
    ]
    after = await store.messages_after("dc-7", stored[1].id)
    assert [m.content for m in after] == ["m2", "m3", "m4"]
    sessions = await store.list_sessions()
    assert [(s.id, s.name, s.message_count) for s in sessions] == [("dc-7", "general", 5)]


async def test_a_message_brings_back_a_folder_removed_under_its_session(
    store: SessionStore,
) -> None:
    """The folder is made only when a message finds it missing: one removed by hand (its
    row kept) is made again, with the line of the message that found it gone."""
    await store.take_in("tg-5", "first", sender="ann")
    folder = store.files("tg-5").dir
    await asyncio.to_thread(shutil.rmtree, folder)
    await store.take_in("tg-5", "second", sender="ann")
    assert folder.is_dir()
    assert [m.content for m in store.files("tg-5").history.read()] == ["second"]
    assert [m.content for m in await store.recent_messages("tg-5", 10)] == ["first", "second"]


async def test_unknown_session_message_rejected(store: SessionStore) -> None:
    with pytest.raises(UnknownSession):
        await store.append_message("cli-nobody", "user", "hi")


async def test_persona_written_to_role_and_rule(store: SessionStore) -> None:
    await store.ensure("cli-x")
    row = await store.update("cli-x", persona="a pirate")
    assert (row.role, row.rule, row.persona) == ("a pirate", "a pirate", "a pirate")

    def legacy(session: Session) -> None:
        conn = session.connection()
        conn.execute(text("UPDATE session SET role = '', rule = 'old' WHERE id = 'cli-x'"))

    await store.db.write(legacy)
    again = await store.require("cli-x")
    assert again.persona == "old"


async def test_self_id_unique_when_not_empty(store: SessionStore) -> None:
    await store.ensure("cli-a")
    await store.ensure("cli-b")
    await store.ensure("cli-c")
    await store.update("cli-a", self_id="bot-1")
    with pytest.raises(Exception, match=r"(?i)unique"):
        await store.update("cli-b", self_id="bot-1")
    # empty self_id is not constrained
    assert (await store.require("cli-b")).self_id == ""
    assert (await store.require("cli-c")).self_id == ""


async def test_one_statement_is_written_and_its_rows_handed_on(store: SessionStore) -> None:
    """`Database.write_one`: one statement committed on its own, on either backend; what it
    returns goes to `after_commit` and back to the caller."""
    seen: list[list[tuple[Any, ...]]] = []
    insert = (
        "INSERT INTO session (id, name, self_id, role, rule, model, reasoning, settings,"
        " created_at, updated_at, owner) VALUES (?, '', '', '', '', '', '', '{}', 1, 2, '')"
        " RETURNING id, updated_at"
    )
    rows = await store.db.write_one(insert, "cli-one", repeatable=False, after_commit=seen.append)
    assert rows == [("cli-one", 2)]
    assert seen == [rows]
    assert (await store.require("cli-one")).updated_at == 2


async def test_file_calls_beside_the_archive_run_off_the_loop(store: SessionStore) -> None:
    """`Database.beside`: blocking file calls that go with the archive's work run on another
    thread and hand back their result or their error; on PostgreSQL on one thread of their
    own, in the order given (SQLite's ride on its database threads instead)."""
    loop_thread = threading.get_ident()
    ran: list[tuple[int, int]] = []

    def call(n: int) -> int:
        ran.append((n, threading.get_ident()))
        return n * 2

    results = await asyncio.gather(*(store.db.beside(partial(call, n)) for n in range(40)))
    assert results == [n * 2 for n in range(40)]
    assert loop_thread not in {thread for _, thread in ran}
    if store.db.dialect == "postgresql":
        assert [n for n, _ in ran] == list(range(40))
        assert len({thread for _, thread in ran}) == 1

    def broken() -> None:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        await store.db.beside(broken)
    assert await store.db.beside(partial(call, 7)) == 14  # the thread goes on after an error


async def test_action_history_once_per_task(store: SessionStore) -> None:
    await store.ensure("cli-r")
    run = RunRecord("cli-r", "task1", "do it", "done", [{"tool": "read_file", "status": "ok"}])
    await store.finish_run(run, "done", sender="agent")
    await store.finish_run(RunRecord("cli-r", "task1", "again", "other"), "other", sender="agent")

    def rows(session: Session) -> list[tuple[str, str, str]]:
        conn = session.connection()
        res = conn.execute(text("SELECT objective, tool_results, reply FROM action_history"))
        return [tuple(r) for r in res.all()]

    got = await store.db.read(rows)
    assert got == [("do it", json.dumps([{"tool": "read_file", "status": "ok"}]), "done")]
    assert [m.content for m in await store.recent_messages("cli-r")] == ["done"]
    assert await store.run_recorded("cli-r", "task1")
    assert await store.finished_run("cli-r", "task1") == {"objective": "do it", "reply": "done"}


async def test_file_history_first_version_per_task(store: SessionStore) -> None:
    await store.ensure("cli-f")
    assert await store.record_file_version("cli-f", "t1", "/w", "a.txt", "v1")
    assert not await store.record_file_version("cli-f", "t1", "/w", "a.txt", "v2")
    assert await store.record_file_version("cli-f", "t2", "/w", "a.txt", "v2")
    assert await store.record_file_version("cli-f", "", "/w", "a.txt", "v3")
    assert await store.record_file_version("cli-f", "", "/w", "a.txt", "v4")

    def rows(session: Session) -> list[tuple[str, str]]:
        conn = session.connection()
        res = conn.execute(text("SELECT task_id, content FROM file_history ORDER BY id"))
        return [tuple(r) for r in res.all()]

    assert await store.db.read(rows) == [("t1", "v1"), ("t2", "v2"), ("", "v3"), ("", "v4")]


async def test_dedupe_migration_keeps_first(database_url: str) -> None:
    db = await Database.open(database_url, migrate=False)
    try:
        await db.migrate("0001")
        values = [
            ("s", "t1", "/d", "a", "first"),
            ("s", "t1", "/d", "a", "second"),
            ("s", "t1", "/d", "a", "third"),
            ("s", "t1", "/d", "b", "b-first"),
            ("s", "t2", "/d", "a", "t2-first"),
            ("s", "t2", "/d", "a", "t2-second"),
            ("s", "", "/d", "a", "untasked-1"),
            ("s", "", "/d", "a", "untasked-2"),
        ]

        def insert(session: Session) -> None:
            conn = session.connection()
            for sid, task, d, name, content in values:
                conn.execute(
                    text(
                        "INSERT INTO file_history (session_id, task_id, dir, name, content) "
                        "VALUES (:s, :t, :d, :n, :c)"
                    ),
                    {"s": sid, "t": task, "d": d, "n": name, "c": content},
                )

        await db.write(insert)
        await db.migrate()
        assert await db.current_revision() == head_revision()

        def rows(session: Session) -> list[str]:
            conn = session.connection()
            res = conn.execute(text("SELECT content FROM file_history ORDER BY id"))
            return [r[0] for r in res.all()]

        assert await db.read(rows) == ["first", "b-first", "t2-first", "untasked-1", "untasked-2"]
        await db.migrate()  # idempotent
        assert await db.read(rows) == ["first", "b-first", "t2-first", "untasked-1", "untasked-2"]
    finally:
        await db.close()


async def test_usage_retention_deletes_exactly_old_rows(store: SessionStore) -> None:
    now = 1_800_000_000_000
    cutoff = now - 28 * DAY_MS
    for offset, model in [(-1, "old"), (0, "edge"), (1, "new"), (-DAY_MS, "older")]:
        await store.usage.record(UsageRecord("cli-u", model, output=1, send_at=cutoff + offset))
    deleted = await store.usage.purge(retention_days=28, now=now)
    assert deleted == 2
    assert {u.model for u in await store.usage.summary()} == {"edge", "new"}


async def test_usage_summary_and_output_tps(store: SessionStore) -> None:
    records = [
        UsageRecord("cli-u", "m1", input=100, output=50, elapsed_ms=1000, tool_calls=["c1"]),
        UsageRecord("cli-u", "m1", input=10, output=150, elapsed_ms=3000, cache_read=7),
        # no timing: counts in totals, not in tps
        UsageRecord("cli-u", "m1", input=1, output=1000, elapsed_ms=0, cache_write=3),
        UsageRecord("cli-v", "m2", input=5, output=0, elapsed_ms=0),
    ]
    for record in records:
        await store.usage.record(record)
    summary = {u.model: u for u in await store.usage.summary()}
    m1 = summary["m1"]
    assert (m1.calls, m1.input, m1.output, m1.cache_read, m1.cache_write) == (3, 111, 1200, 7, 3)
    assert m1.elapsed_ms == 4000
    assert m1.output_tps == pytest.approx(200 / 4.0)
    assert summary["m2"].output_tps == 0.0
    only_v = await store.usage.summary(session_id="cli-v")
    assert [u.model for u in only_v] == ["m2"]


async def test_daily_usage_groups_by_utc_day_and_model(store: SessionStore) -> None:
    day = 20_000  # days since 1970
    at = day * DAY_MS
    records = [
        UsageRecord("cli-u", "m1", input=10, output=20, elapsed_ms=1000, send_at=at + 5),
        UsageRecord("cli-u", "m1", input=1, output=2, send_at=at + DAY_MS - 1),
        UsageRecord("cli-u", "m2", output=7, cache_read=3, send_at=at + DAY_MS),
        UsageRecord("cli-u", "m1", output=100, elapsed_ms=2000, send_at=at + DAY_MS + 1),
        UsageRecord("cli-u", "m1", output=999, send_at=at - 1),  # before `since`
    ]
    for record in records:
        await store.usage.record(record)
    rows = await store.usage.daily(since_ms=at)
    got = [(r.day, r.usage.model, r.usage.input, r.usage.output, r.usage.cache_read) for r in rows]
    assert got == [
        (day, "m1", 11, 22, 0),
        (day + 1, "m1", 0, 100, 0),
        (day + 1, "m2", 0, 7, 3),
    ]
    assert rows[0].usage.output_tps == pytest.approx(20.0)


async def test_old_note_tables_are_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "legacy" / "history.db"
    path.parent.mkdir()
    legacy = sqlite3.connect(path)
    legacy.execute("CREATE TABLE note (id INTEGER PRIMARY KEY, body TEXT)")
    legacy.execute("CREATE VIRTUAL TABLE note_fts5 USING fts5(body)")
    legacy.execute("INSERT INTO note (body) VALUES ('keep me')")
    legacy.commit()
    legacy.close()
    settings = Settings(
        home=tmp_path / "home", database_url=f"sqlite+aiosqlite:///{path}", _env_file=None
    )
    store = await SessionStore.open(settings)
    try:
        await store.ensure("cli-n")
        await store.append_message("cli-n", "user", "still works")
        assert [h.content for h in await store.search.messages("works")] == ["still works"]
    finally:
        await store.close()
    check = sqlite3.connect(path)
    assert check.execute("SELECT body FROM note").fetchall() == [("keep me",)]
    check.close()


async def test_unsupported_database_url_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="unsupported database"):
        Database("mysql://x/y")
    with pytest.raises(DatabaseError, match="in-memory"):
        Database("sqlite+aiosqlite:///:memory:")


async def test_delete_session_removes_rows_and_files(store: SessionStore) -> None:
    await store.ensure("temp-z")
    await store.append_message("temp-z", "user", "bye now")
    assert await store.delete("temp-z")
    assert await store.get("temp-z") is None
    assert await store.search.messages("bye now") == []
    assert not store.dirs.path_of("temp-z").is_dir()


@pytest.mark.parametrize(
    ("seconds", "others_wait", "transactions"), [(0.0, False, 3), (60.0, False, 1), (60.0, True, 3)]
)
async def test_many_sessions_deleted_in_chunks(
    store: SessionStore,
    monkeypatch: pytest.MonkeyPatch,
    seconds: float,
    others_wait: bool,
    transactions: int,
) -> None:
    """Three chunks of ids for five sessions and one that never was: a transaction each when
    none may hold the writer for long or other writes wait for it, all in one otherwise."""
    from gateway.store import removal

    monkeypatch.setattr(removal, "DELETE_CHUNK", 2)
    monkeypatch.setattr(removal, "TRANSACTION_SECONDS", seconds)
    monkeypatch.setattr(store.db, "writes_waiting", lambda: others_wait)
    ids = [f"temp-many{i}" for i in range(5)]
    for sid in ids:
        await store.ensure(sid)
        await store.append_message(sid, "user", f"note from {sid}")
    await store.ensure("temp-stays")
    writes = 0
    write = store.db.write

    async def counted(work: Any) -> Any:
        nonlocal writes
        writes += 1
        return await write(work)

    monkeypatch.setattr(store.db, "write", counted)
    gone = await store.removal.delete_many([*ids, "temp-never-was"])
    assert gone == ids
    assert writes == transactions
    assert [await store.get(sid) for sid in ids] == [None] * 5
    assert not any(store.dirs.path_of(sid).is_dir() for sid in ids)
    assert await store.search.messages("note from") == []
    assert await store.get("temp-stays") is not None


async def test_a_failed_pass_says_why_its_last_folders_stayed(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass whose next write fails while its last folders failed to move leaves no task
    exception for the loop to call never retrieved: the move's failure is logged."""
    from gateway.store import removal

    monkeypatch.setattr(removal, "DELETE_CHUNK", 1)
    monkeypatch.setattr(removal, "TRANSACTION_SECONDS", 0.0)
    ids = ["temp-fails0", "temp-fails1"]
    for sid in ids:
        await store.ensure(sid)
    moved = threading.Event()

    def refuse(batch: list[str]) -> set[str]:
        moved.set()
        raise OSError("disk gone")

    monkeypatch.setattr(store.dirs, "delete_many", refuse)
    write = store.db.write
    writes = 0

    async def second_fails(work: Any) -> Any:
        nonlocal writes
        writes += 1
        if writes == 1:
            return await write(work)
        await asyncio.to_thread(moved.wait, 5)
        moving = [t for t in asyncio.all_tasks() if "_folders_gone" in repr(t.get_coro())]
        if moving:  # the move has failed by now, or does so within the wait
            await asyncio.wait(moving, timeout=5)
        raise RuntimeError("database gone")

    monkeypatch.setattr(store.db, "write", second_fails)
    unretrieved: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        with capture_logs() as logs, pytest.raises(RuntimeError, match="database gone"):
            await store.removal.delete_many(ids)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert unretrieved == []
    assert [line["error"] for line in logs if "trash failed" in line["event"]] == [
        "OSError('disk gone')"
    ]


async def test_deleted_session_leaves_no_row_in_any_table(store: SessionStore) -> None:
    await populate(store, "temp-gone", "zebrafish")
    await populate(store, "cli-stays", "hedgehog")
    had = await rows_of(store.db, "temp-gone", marker="zebrafish")
    assert set(had) >= SESSION_TABLES
    assert await store.delete("temp-gone")
    assert await rows_of(store.db, "temp-gone", marker="zebrafish") == {}
    assert await store.search.messages("zebrafish") == []
    assert await rows_of(store.db, "cli-stays", marker="hedgehog") == had


async def test_renamed_session_leaves_no_row_under_the_old_id(store: SessionStore) -> None:
    await populate(store, "tg--100", "zebrafish")
    had = await rows_of(store.db, "tg--100", marker="zebrafish")
    assert set(had) >= SESSION_TABLES
    assert await store.rename("tg--100", "tg--1001")
    assert await rows_of(store.db, "tg--100", marker="zebrafish") == {}
    assert await rows_of(store.db, "tg--1001", marker="zebrafish") == had
    assert {m.session_id for m in await store.search.messages("zebrafish")} == {"tg--1001"}
    assert store.dirs.path_of("tg--1001").is_dir()
    assert not store.dirs.path_of("tg--100").exists()


async def test_session_renamed_onto_an_existing_one_joins_it(store: SessionStore) -> None:
    await populate(store, "tg--100", "zebrafish")
    await populate(store, "tg--1001", "hedgehog")
    moving = await rows_of(store.db, "tg--100", marker="zebrafish")
    staying = await rows_of(store.db, "tg--1001", marker="hedgehog")
    assert await store.rename("tg--100", "tg--1001")
    assert await rows_of(store.db, "tg--100", marker="zebrafish") == {}
    joined = await rows_of(store.db, "tg--1001", marker="zebrafish")
    for table in SESSION_TABLES - {"session"}:
        assert joined[table] == moving[table] + staying[table], table
    assert joined["session"] == 1
    assert {m.session_id for m in await store.search.messages("zebrafish")} == {"tg--1001"}
    assert store.dirs.path_of("tg--100").is_dir()  # both had folders: the old one is kept
    assert not await store.rename("tg--100", "tg--1002")


async def worker_ready(proc: asyncio.subprocess.Process) -> None:
    """Wait for a store worker's READY line; log lines may come before it."""
    assert proc.stdout is not None and proc.stderr is not None
    while (line := await proc.stdout.readline()) != b"READY\n":
        if not line:
            pytest.fail((await proc.stderr.read()).decode()[-2000:])


@pytest.mark.slow
async def test_two_processes_append_concurrently(settings: Settings, database_url: str) -> None:
    cfg = Settings(home=settings.home, database_url=database_url, _env_file=None)
    store = await SessionStore.open(cfg)
    await store.ensure("cli-shared")
    worker = Path(__file__).with_name("store_worker.py")
    env = {"AGENVOY_HOME": str(cfg.home), "AGENVOY_DATABASE_URL": database_url, "PATH": "/usr/bin"}
    count = 300
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(worker),
            "cli-shared",
            tag,
            str(count),
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for tag in ("a", "b")
    ]
    try:
        for proc in procs:
            await asyncio.wait_for(worker_ready(proc), 60)
        # Both stores are open: release their appends together so they contend.
        results = await asyncio.wait_for(
            asyncio.gather(*(p.communicate(b"go\n") for p in procs)), timeout=240
        )
        for proc, (_out, err) in zip(procs, results, strict=True):
            assert proc.returncode == 0, err.decode()[-2000:]
        in_sql = await store.messages_after("cli-shared", 0, limit=5000)
        in_file = store.files("cli-shared").history.read()
        expected = {f"{tag}-{i}" for tag in "ab" for i in range(count)}
        assert len(in_sql) == 2 * count and {m.content for m in in_sql} == expected
        assert len(in_file) == 2 * count and {m.content for m in in_file} == expected
        # The archive interleaves the two writers, or this did not exercise contention.
        switches = sum(1 for a, b in itertools.pairwise(in_sql) if a.sender != b.sender)
        assert switches > 1
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
        await store.close()


async def test_an_open_at_head_asks_the_version_table_and_runs_no_upgrade(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every process start and every operator command opens the archive: at head, that costs
    one query, not a load of every migration script (which the upgrade command does)."""
    first = await Database.open(database_url)
    await first.close()
    upgrades: list[str] = []
    from alembic import command

    monkeypatch.setattr(command, "upgrade", lambda _config, rev: upgrades.append(rev))
    again = await Database.open(database_url)
    try:
        assert await again.current_revision() == head_revision()
    finally:
        await again.close()
    assert upgrades == []
    # Behind head, the upgrade still runs.
    behind = await Database.open(database_url, migrate=False)
    try:
        await behind.migrate("0001")
    finally:
        await behind.close()
    assert upgrades == ["0001"]
