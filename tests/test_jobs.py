from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
from conftest import _pg_database as pg_database
from conftest import _pg_drop as pg_drop
from sqlalchemy import text
from sqlmodel import Session
from store_rows import SESSION_TABLES, populate, rows_of
from support import wait_until

from gateway.clock import now_ms
from gateway.cluster.ownership import lease_of
from gateway.events import Inbound, Origin
from gateway.jobs import SESSION_KEY_PREFIXES, Reaper, SessionWatcher, every
from gateway.presence import PRESENCE_PREFIX
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.models import PromptAnswerRow, TaskJournalRow
from gateway.store.sessions import SessionStore

ANN = Origin("http", sender_id="ann", sender_name="Ann")
HOUR_MS = 3_600_000


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    rt = await Runtime.start(Settings(home=tmp_path / "home", _env_file=None))
    try:
        yield rt
    finally:
        await rt.close()


async def age(runtime: Runtime, session_id: str, ms: int) -> None:
    def work(session: Session) -> None:
        session.connection().execute(
            text("UPDATE session SET updated_at = :t WHERE id = :sid"),
            {"t": now_ms() - ms, "sid": session_id},
        )

    await runtime.store.db.write(work)


def reaper_of(runtime: Runtime, idle: float = 1800) -> Reaper:
    return Reaper(runtime.store, runtime.kv, runtime.presence, runtime.router, idle)


async def test_reaps_only_idle_temp_sessions(runtime: Runtime) -> None:
    router = runtime.router
    for sid in ("temp-idle", "temp-fresh", "temp-busy", "cli-old", "chat-old", "dc-1", "tg--2"):
        task = await router.submit(Inbound(ANN, sid, "hi"))
        await router.wait(task.task_hash, 10)
    for sid in ("temp-idle", "temp-busy", "cli-old", "chat-old", "dc-1", "tg--2"):
        await age(runtime, sid, 2 * HOUR_MS)
    busy = await router.submit(Inbound(ANN, "temp-busy", "!sleep 30"))
    await runtime.kv.set("toolcache:temp-idle:search", "{}", ttl=600)
    await runtime.kv.set("errmem:temp-idle:tool", "{}", ttl=600)
    await runtime.kv.set("toolcache:cli-old:search", "{}", ttl=600)
    reaped = await reaper_of(runtime).run_once()
    assert reaped == ["temp-idle"]
    assert await runtime.store.get("temp-idle") is None
    assert not runtime.store.dirs.path_of("temp-idle").is_dir()
    assert await runtime.kv.scan("toolcache:temp-idle:") == {}
    assert await runtime.kv.scan("errmem:temp-idle:") == {}
    assert await runtime.kv.get("toolcache:cli-old:search") == "{}"
    assert await runtime.store.recent_messages("temp-idle") == []
    for sid in ("temp-fresh", "temp-busy", "cli-old", "chat-old", "dc-1", "tg--2"):
        assert await runtime.store.get(sid) is not None, sid
        assert runtime.store.dirs.path_of(sid).is_dir(), sid
    await router.cancel("temp-busy", busy.task_hash, by="test")


async def test_reaped_session_leaves_no_row_nor_key(tmp_path: Path, database_url: str) -> None:
    settings = Settings(home=tmp_path / "home", database_url=database_url, _env_file=None)
    runtime = await Runtime.start(settings)
    try:
        sid = "temp-reaped"
        task = await runtime.router.submit(Inbound(ANN, sid, "hi"))
        await runtime.router.wait(task.task_hash, 10)

        async def let_go() -> bool:
            # The run lets go of its session a moment after it ends (with several instances
            # possible, its lease after a linger, taking up what was stored meanwhile).
            return not runtime.router.is_busy(sid) and not runtime.leases.holds(lease_of(sid))

        assert await wait_until(let_go, 10)
        await populate(runtime.store, sid, "zebrafish")
        await populate(runtime.store, "temp-fresh", "hedgehog")
        had = await rows_of(runtime.store.db, sid, marker="zebrafish")
        assert set(had) >= SESSION_TABLES
        # A presence key would keep the session alive; the other key spaces are cleared.
        for prefix in set(SESSION_KEY_PREFIXES) - {PRESENCE_PREFIX}:
            await runtime.kv.set(f"{prefix}{sid}:entry", "{}", ttl=600)
            await runtime.kv.set(f"{prefix}temp-fresh:entry", "{}", ttl=600)
        await age(runtime, sid, 2 * HOUR_MS)
        # Its second task is stored, not finished: the session stays whole while it waits.
        assert await reaper_of(runtime).run_once() == []
        assert await rows_of(runtime.store.db, sid, marker="zebrafish") == had
        assert runtime.store.dirs.path_of(sid).is_dir()
        fresh = await rows_of(runtime.store.db, "temp-fresh", marker="hedgehog")
        assert set(fresh) >= SESSION_TABLES
        assert await runtime.router.recover() == 2  # each session's stored task

        async def finished() -> bool:
            return await runtime.store.unfinished() == [] and await let_go()

        assert await wait_until(finished, 10)
        await age(runtime, sid, 2 * HOUR_MS)
        assert await reaper_of(runtime).run_once() == [sid]
        assert await rows_of(runtime.store.db, sid, marker="zebrafish") == {}
        assert [key for key in await runtime.kv.scan("") if sid in key] == []
        assert not runtime.store.dirs.path_of(sid).exists()
        # The other session is untouched, but for what its finished task cleared.
        done_with = {TaskJournalRow.__tablename__, PromptAnswerRow.__tablename__}
        fresh = await rows_of(runtime.store.db, "temp-fresh", marker="hedgehog")
        assert set(fresh) >= SESSION_TABLES - done_with
        assert len([key for key in await runtime.kv.scan("") if "temp-fresh" in key]) == 2
    finally:
        await runtime.close()


async def test_queued_temp_session_survives(runtime: Runtime) -> None:
    router = runtime.router
    await router.submit(Inbound(ANN, "temp-q", "!sleep 30"))
    await router.submit(Inbound(ANN, "temp-q", "queued behind"))
    await age(runtime, "temp-q", 2 * HOUR_MS)
    assert await reaper_of(runtime).run_once() == []
    await router.cancel_all("temp-q", by="test")


async def test_running_in_another_process_survives(runtime: Runtime) -> None:
    await runtime.store.ensure("temp-elsewhere")
    await age(runtime, "temp-elsewhere", 2 * HOUR_MS)
    await runtime.kv.set("action:temp-elsewhere:abc", '{"instance": "other"}', ttl=60)
    assert await reaper_of(runtime).run_once() == []


async def test_orphan_temp_directory_is_reaped_by_age(runtime: Runtime) -> None:
    orphan = runtime.store.dirs.create("temp-orphan").dir
    old = (now_ms() - 2 * HOUR_MS) / 1000
    os.utime(orphan, (old, old))
    assert await reaper_of(runtime).run_once() == ["temp-orphan"]
    assert not orphan.exists()


async def test_reaped_folders_are_emptied_in_the_background(
    runtime: Runtime, tmp_path: Path
) -> None:
    dirs = runtime.store.dirs
    for sid in ("temp-a", "temp-b"):
        await runtime.store.ensure(sid)
        (dirs.path_of(sid) / "workspace").mkdir()
        (dirs.path_of(sid) / "workspace" / "big.bin").write_bytes(b"x" * 4096)
        await age(runtime, sid, 2 * HOUR_MS)
    # What a crash left mid-emptying, and a link planted in the trash: the link goes, never
    # what it points at.
    dirs.trash.mkdir(exist_ok=True)
    (dirs.trash / "temp-crashed.0011").mkdir()
    (dirs.trash / "temp-crashed.0011" / "history.json").write_text("[]")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (dirs.trash / "temp-link.0022").symlink_to(outside)

    assert sorted(await reaper_of(runtime).run_once()) == ["temp-a", "temp-b"]
    assert not dirs.path_of("temp-a").exists()  # gone from the sessions at once
    await asyncio.wait_for(runtime.store.trash.settled(), 10)
    assert list(dirs.trash.iterdir()) == []
    assert (outside / "keep.txt").read_text() == "mine"


async def test_watcher_logs_new_sessions_from_another_process(runtime: Runtime) -> None:
    seen: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    watcher = SessionWatcher(runtime.store, on_new=lambda sid, name: seen.put_nowait((sid, name)))
    job = asyncio.create_task(watcher.run())
    try:
        await asyncio.wait_for(watcher.ready.wait(), 10)
        await runtime.store.ensure("cli-named", name="planning")
        root = runtime.store.dirs.root
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", f"import os; os.mkdir({str(root / 'tg--77')!r})"
        )
        assert await asyncio.wait_for(child.wait(), 10) == 0
        (root / "not-a-session").mkdir()
        found = {await asyncio.wait_for(seen.get(), 10) for _ in range(2)}
        assert found == {("cli-named", "planning"), ("tg--77", "")}
    finally:
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job


# A process that removes sessions two at a time, a transaction each, and is killed inside its
# second transaction: the first committed (its folders maybe not yet in the trash), the
# second's deletes never.
REAP_AND_DIE = """
import asyncio, os, signal, sys
from gateway.settings import Settings
from gateway.store import removal
from gateway.store.sessions import SessionStore

removal.DELETE_CHUNK, removal.TRANSACTION_SECONDS = 2, 0.0
real, calls = removal._delete_rows, []

def dying(session, ids, start, busy, unless_active_since):
    result = real(session, ids, start, busy, unless_active_since)
    calls.append(start)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return result

removal._delete_rows = dying

async def main():
    store = await SessionStore.open(Settings(home=sys.argv[1], _env_file=None))
    await store.removal.delete_many(sys.argv[2:])

asyncio.run(main())
"""


async def test_a_pass_killed_between_its_transactions_is_finished_by_the_next(
    runtime: Runtime,
) -> None:
    """SIGKILL inside a reaper transaction: the next pass takes away exactly what is left,
    rows and folders, and nothing else."""
    doomed = [f"temp-doomed{n}" for n in range(6)]
    for sid in [*doomed, "temp-kept"]:
        await populate(runtime.store, sid, sid.removeprefix("temp-"))
    kept = await rows_of(runtime.store.db, "temp-kept", marker="kept")
    two_hours_ago = (now_ms() - 2 * HOUR_MS) / 1000
    for sid in doomed:
        # Each one's waiting task finished long ago (a stored one would keep it).
        await runtime.store.drop_journal(f"wait-{sid.removeprefix('temp-')}")
        await age(runtime, sid, 2 * HOUR_MS)
        os.utime(runtime.store.dirs.path_of(sid), (two_hours_ago, two_hours_ago))
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", REAP_AND_DIE, str(runtime.settings.home), *doomed
    )
    assert await asyncio.wait_for(child.wait(), 30) == -9
    first_two_rows = [await runtime.store.get(sid) for sid in doomed[:2]]
    assert first_two_rows == [None, None]  # committed before the kill
    assert all([await runtime.store.get(sid) for sid in doomed[2:]])  # rolled back

    reaped = await reaper_of(runtime).run_once()
    assert set(reaped) <= set(doomed) and set(doomed[2:]) <= set(reaped)
    for sid in doomed:
        assert await rows_of(runtime.store.db, sid, marker=sid.removeprefix("temp-")) == {}, sid
        assert not runtime.store.dirs.path_of(sid).exists(), sid
    assert await rows_of(runtime.store.db, "temp-kept", marker="kept") == kept
    assert runtime.store.dirs.path_of("temp-kept").is_dir()


async def test_a_job_that_loses_its_cancellation_still_stops_the_loop() -> None:
    """The loop around a job stops when cancelled even if the job swallowed the cancellation
    (as a client library can inside a read's timeout), instead of sleeping on."""
    started = asyncio.Event()

    async def swallowing() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return  # lost, as redis-py may lose it

    loop_task = asyncio.create_task(every(3600, swallowing, name="swallowing"))
    await asyncio.wait_for(started.wait(), 5)
    loop_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(loop_task, 5)


async def test_a_message_taken_in_while_the_reaper_deletes_its_session_is_kept(
    tmp_path: Path,
) -> None:
    """PostgreSQL: a message taken in for an idle temp session while the reaper's transaction
    runs (its session row updated, its journal written, not yet committed) makes the reaper
    wait for it and then spare the session; nothing of the message is lost."""
    url, name = await pg_database()
    store = await SessionStore.open(
        Settings(home=tmp_path / "home", database_url=url, _env_file=None)
    )
    other = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        sid = "temp-racing"
        await store.ensure(sid)
        await store.append_message(sid, "user", "an old message")
        cutoff = now_ms() - HOUR_MS
        await other.execute("UPDATE session SET updated_at = $1 WHERE id = $2", cutoff - 1, sid)
        # What an intake does, in a transaction of its own, left open.
        intake = other.transaction()
        await intake.start()
        await other.execute("UPDATE session SET updated_at = $1 WHERE id = $2", now_ms(), sid)
        message_id = await other.fetchval(
            "INSERT INTO messages (session_id, role, content, sender, send_at)"
            " VALUES ($1, 'user', 'a new message', 'ann', $2) RETURNING id",
            sid,
            now_ms(),
        )
        await other.execute(
            "INSERT INTO task_journal (task_hash, session_id, origin, text, user_message_id,"
            " user_sent_at, submitted_at, status, steps, prompt, updated_at)"
            " VALUES ('task-racing', $1, '{}', 'a new message', $2, 0, 0, 'queued', '[]', '', 0)",
            sid,
            message_id,
        )
        reaping = asyncio.create_task(store.removal.delete_many([sid], unless_active_since=cutoff))

        async def waiting_for_the_intake() -> bool:
            rows = await other.fetch(
                "SELECT 1 FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
                name,
            )
            return bool(rows) or reaping.done()

        assert await wait_until(waiting_for_the_intake, 10)
        assert not reaping.done(), "the reaper did not wait for the intake's session row"
        await intake.commit()
        assert await asyncio.wait_for(reaping, 10) == []
        kept = [m.content for m in await store.recent_messages(sid, 10)]
        assert kept == ["an old message", "a new message"]
        assert [j.task_hash for j in await store.unfinished(sid)] == ["task-racing"]
        assert store.dirs.path_of(sid).is_dir()
    finally:
        await other.close()
        await store.close()
        await pg_drop(name)


async def test_a_session_active_since_the_cut_off_is_spared(
    tmp_path: Path, database_url: str
) -> None:
    """A task that ran and finished between the reaper's idle check and its delete leaves no
    journal, but its session's activity is newer than the cut-off: the session stays."""
    store = await SessionStore.open(
        Settings(home=tmp_path / "home", database_url=database_url, _env_file=None)
    )
    try:
        cutoff = now_ms() - HOUR_MS
        for sid in ("temp-answered", "temp-idle"):
            await store.ensure(sid)
            await store.append_message(sid, "user", "hello")

        def touch(session: Session) -> None:
            for sid, at in (("temp-answered", now_ms()), ("temp-idle", cutoff - 1)):
                session.connection().execute(
                    text("UPDATE session SET updated_at = :t WHERE id = :sid"),
                    {"t": at, "sid": sid},
                )

        await store.db.write(touch)
        gone = await store.removal.delete_many(
            ["temp-answered", "temp-idle"], unless_active_since=cutoff
        )
        assert gone == ["temp-idle"]
        assert await store.get("temp-answered") is not None
        assert store.dirs.path_of("temp-answered").is_dir()
        assert [m.content for m in await store.recent_messages("temp-answered", 10)] == ["hello"]
    finally:
        await store.close()
