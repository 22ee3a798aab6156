"""Store at scale: idle sessions, the temp-session reaper, start-up over a big home and search
over a million messages, each against a floor measured in the same run.

    .venv/bin/python bench/store_scale.py [--quick] [--json FILE] [--parts LIST] [--trace-memory]

Goal 6 of the performance issue, at full size (--quick shrinks every size for a smoke run and
judges no goal):

1. Memory per idle session <= 2 KiB. A fresh process starts a `Runtime` (SQLite, the offline
   agent) and touches 10,000 sessions it has never seen (--quick: 1,000), 32 at a time. To
   touch a session is what a quiet group chat costs: one `Router.record` (session row and
   folder, archive row, history.json and action.log lines) and one read of the session's
   settings (`SessionSettings.get`). Reported: (RSS after - RSS before) / sessions, RSS from
   /proc/self/statm after gc.collect(), "before" taken after 200 warm-up sessions; also live
   Python objects per session. Floor: another fresh process writing the same rows (session
   and message, one transaction each, then the session's row read back) with bare sqlite3 on
   one connection. --trace-memory adds a third run under tracemalloc that names the gateway
   lines holding what the touched sessions left behind.
2. Reaper over 100,000 idle temp-* sessions (--quick: 1,000) <= 1.5x its floor (an absolute
   bound says more of the disk: the floor's own pass takes about 10 s here). A home seeded
   with bare sqlite3 and os calls (schema from our migrations): each idle session has a row, two
   messages, a run, a usage row and a folder with history.json; next to them sessions that
   must survive (idle permanent ones, fresh temp ones, idle temp ones another instance is
   running) and folders without a row (old ones are reaped, a fresh one is not). Ours: one
   pass of `Reaper.run_once` under the cleanup job's lease, as `gateway.app` runs it (it reads
   the wall clock, so idle means two hours old). Floor: the same deletions as one bare
   `DELETE ... WHERE session_id IN (...)` per table, then one rename of each folder into a
   trash folder, on an identical home. The pass ends there for both; emptying the trash
   afterwards (the gateway does it on a thread) is timed and shown apart. Both are checked:
   what is gone, what is kept, the full-text index.
3. Start-up with 100,000 session folders (--quick: 3,000) and 10 unfinished tasks < 3 s.
   Seeded the same fast way (row, message, folder with history.json each); the 10 tasks are
   journaled through `SessionStore.take_in`, the way the intake stores a task that has not
   run. Timed from exec of `agenvoy run` to /healthz answering 200, and to the 10 tasks
   finished (the offline agent echoes; read back by long-polling each task after the
   "gateway ready" log line). Floor: `agenvoy run` on an empty, migrated home, the median of
   three starts around the others (after one untimed start); also shown, a home with only
   the 10 tasks.
4. Full-text search p99 over 1,000,000 messages (--quick: 20,000) < 20 ms: store_bench.py's
   loader, query mix and measurement (ours `Search.messages`, floor a bare sqlite3 MATCH),
   with 1,000 queries (--quick: 200) so that p99 is not one query's hiccup.

Everything lives under one temporary directory that is removed at the end. The exit status
is 0 when the run finishes, whether or not a goal is met.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import store_bench

from gateway.engine.journal import JournalHead
from gateway.events import Inbound, Origin
from gateway.ids import new_task_hash
from gateway.jobs import Reaper
from gateway.leadership import if_leading
from gateway.logs import configure_logging
from gateway.presence import presence_key
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.db import Database
from gateway.store.history_file import HistoryMessage
from gateway.store.message_reads import StoredMessage
from gateway.store.models import PER_SESSION_TABLES
from gateway.store.sessions import SessionStore
from gateway.store.sqlite_setup import sqlite_pragmas

EXE = shutil.which("agenvoy") or str(Path(sys.executable).with_name("agenvoy"))
PARTS = ("memory", "reaper", "startup", "fts")
KIB = 1024
MIB = 1024 * 1024

GOAL_BYTES_PER_SESSION = 2 * KIB
GOAL_REAPER_RATIO = 1.5
GOAL_STARTUP_SECONDS = 3.0
GOAL_FTS_P99_MS = 20.0

WARM_SESSIONS = 200
TOUCH_CONCURRENCY = 32
UNFINISHED_TASKS = 10
TRACE_FRAMES = 12  # deep enough to get from pathlib or json back to the gateway's line
IDLE_MS = 2 * 3_600_000  # well past the reaper's 30 minutes
START_TIMEOUT_SECONDS = 600.0
SEED = 20240611
BENCH_INSTANCE = "bench-scale"
ANN = Origin("http", sender_id="ann", sender_name="Ann")


@dataclass(frozen=True)
class Scale:
    idle_sessions: int
    reaper_sessions: int
    startup_folders: int
    fts_messages: int
    fts_queries: int


FULL = Scale(
    idle_sessions=10_000,
    reaper_sessions=100_000,
    startup_folders=100_000,
    fts_messages=1_000_000,
    # p99 of 200 samples is the second-slowest query, which one hiccup of a shared machine
    # decides; 1,000 make it the tenth.
    fts_queries=1_000,
)
# A smoke run (CI runs it every time): each part once, at sizes that take seconds.
QUICK = Scale(
    idle_sessions=1_000,
    reaper_sessions=1_000,
    startup_folders=3_000,
    fts_messages=20_000,
    fts_queries=200,
)


# -- shared helpers ------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def ratio(ours: float, floor: float) -> float:
    return ours / floor if floor > 0 else float("inf")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def bench_settings(home: Path) -> Settings:
    return Settings(home=home, instance_id=BENCH_INSTANCE, _env_file=None)


def bare_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in sqlite_pragmas():
        conn.execute(pragma)
    return conn


async def migrated(path: Path) -> Path:
    """`path` created with exactly our schema (tables, FTS5 index, triggers)."""
    db = await Database.open(f"sqlite:///{path}")
    await db.close()
    return path


def uuid_ids(prefix: str, count: int, rng: random.Random) -> list[str]:
    return [f"{prefix}-{uuid.UUID(int=rng.getrandbits(128), version=4)}" for _ in range(count)]


@dataclass(frozen=True)
class Seeded:
    session_id: str
    updated_at: int


def seed_archive(db_path: Path, sessions_root: Path, seeded: Sequence[Seeded], marker: str) -> None:
    """Rows and folders of sessions that have talked once: a session row, a user message and
    its reply (`marker` in the question), the run and its usage, and history.json holding
    the two messages with their archive ids. One transaction; the triggers index the text."""
    conn = bare_connect(db_path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM messages").fetchone()[0]
        conn.executemany(
            "INSERT INTO session (id, created_at, updated_at) VALUES (?, ?, ?)",
            ((s.session_id, s.updated_at - 1000, s.updated_at) for s in seeded),
        )
        messages: list[tuple[int, str, str, str, str, int, str]] = []
        runs: list[tuple[str, str, str, str, int]] = []
        usage: list[tuple[str, int]] = []
        for k, s in enumerate(seeded):
            sid, at, task, mid = s.session_id, s.updated_at, f"{k:016x}", first + 2 * k
            question = f"{marker} question {k}"
            messages.append((mid, sid, "user", question, "ann", at - 500, task))
            messages.append((mid + 1, sid, "assistant", f"echo: {question}", "agent", at, task))
            runs.append((sid, task, question, f"echo: {question}", at))
            usage.append((sid, at))
        conn.executemany(
            "INSERT INTO messages (id, session_id, role, content, sender, send_at, task_hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            messages,
        )
        conn.executemany(
            "INSERT INTO action_history (session_id, task_hash, objective, reply, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            runs,
        )
        conn.executemany(
            "INSERT INTO usage (session_id, model, input, output, send_at) "
            "VALUES (?, 'offline', 3, 4, ?)",
            usage,
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    sessions_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    for k, s in enumerate(seeded):
        folder = sessions_root / s.session_id
        os.mkdir(folder, 0o700)
        lines = [
            HistoryMessage(m[2], m[3], m[5], m[4], m[0]).to_json()
            for m in messages[2 * k : 2 * k + 2]
        ]
        with open(folder / "history.json", "wb") as file:
            file.write(b"[\n" + b",\n".join(lines) + b"\n]\n")


def flush_to_disk() -> None:
    """Write back what seeding left dirty, so the timed work does not pay for it."""
    os.sync()


def list_folders(root: Path) -> set[str]:
    # The trash (`.trash`) is not a session's folder.
    return {e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith(".")}


# -- 1. memory per idle session ------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settled() -> tuple[int, int]:
    gc.collect()
    return rss_bytes(), len(gc.get_objects())


def idle_session_id(index: int) -> str:
    return f"tg--100{index:07d}"


async def each_concurrently(indexes: Iterable[int], touch: Callable[[int], Any]) -> None:
    pending = iter(indexes)

    async def worker() -> None:
        for index in pending:
            await touch(index)

    await asyncio.gather(*(worker() for _ in range(TOUCH_CONCURRENCY)))


def gateway_site(frames: Sequence[tracemalloc.Frame]) -> str:
    """The innermost frame in our code: the line that made (or asked for) the allocation."""
    for frame in reversed(frames):  # tracemalloc lists the oldest call first
        path = frame.filename.replace(os.sep, "/")
        for package in ("/gateway/", "/adapters/"):
            if package in path:
                return f"{package[1:]}{path.split(package, 1)[1]}:{frame.lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


async def memory_ours(home: Path, sessions: int, trace: bool) -> dict[str, Any]:
    runtime = await Runtime.start(bench_settings(home))

    async def touch(index: int) -> None:
        sid = idle_session_id(index)
        origin = Origin("telegram", sender_id=str(index), sender_name=f"user{index}")
        text = f"chatter {index} about the weather"
        await runtime.router.record(
            Inbound(origin, sid, text, source_key=f"telegram:scale:{index}")
        )
        if await runtime.session_settings.get(sid) is None:
            raise AssertionError(f"{sid} was not stored")

    try:
        await each_concurrently(range(WARM_SESSIONS), touch)
        rss_before, objects_before = settled()
        if trace:
            tracemalloc.start(TRACE_FRAMES)
        started = time.perf_counter()
        await each_concurrently(range(WARM_SESSIONS, WARM_SESSIONS + sessions), touch)
        elapsed = time.perf_counter() - started
        rss_after, objects_after = settled()
        sites: list[tuple[str, int, int]] = []
        if trace:
            snapshot = tracemalloc.take_snapshot()
            tracemalloc.stop()
            by_site: dict[str, list[int]] = {}
            for stat in snapshot.statistics("traceback"):
                site = by_site.setdefault(gateway_site(list(stat.traceback)), [0, 0])
                site[0] += stat.size
                site[1] += stat.count
            ranked = sorted(by_site.items(), key=lambda item: -item[1][0])
            sites = [(name, size, count) for name, (size, count) in ranked[:12]]
    finally:
        await runtime.close()
    return {
        "rss_before": rss_before,
        "rss_after": rss_after,
        "objects_before": objects_before,
        "objects_after": objects_after,
        "seconds": elapsed,
        "sites": sites,
    }


def memory_floor(db_path: Path, sessions: int) -> dict[str, Any]:
    conn = bare_connect(db_path)

    def touch(index: int) -> None:
        sid = idle_session_id(index)
        at = now_ms()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO session (id, created_at, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (sid, at, at),
        )
        conn.execute(
            "INSERT INTO messages (session_id, role, content, sender, send_at, source_key) "
            "VALUES (?, 'user', ?, ?, ?, ?)",
            (sid, f"chatter {index} about the weather", f"user{index}", at, f"tg:{index}"),
        )
        conn.execute("COMMIT")
        if conn.execute("SELECT * FROM session WHERE id = ?", (sid,)).fetchone() is None:
            raise AssertionError(f"{sid} was not stored")

    try:
        for index in range(WARM_SESSIONS):
            touch(index)
        rss_before, objects_before = settled()
        started = time.perf_counter()
        for index in range(WARM_SESSIONS, WARM_SESSIONS + sessions):
            touch(index)
        elapsed = time.perf_counter() - started
        rss_after, objects_after = settled()
    finally:
        conn.close()
    return {
        "rss_before": rss_before,
        "rss_after": rss_after,
        "objects_before": objects_before,
        "objects_after": objects_after,
        "seconds": elapsed,
        "sites": [],
    }


def run_child(kind: str, root: Path, sessions: int) -> dict[str, Any]:
    """One measurement in a process of its own, so RSS holds nothing of this one."""
    argv = [sys.executable, __file__, "--child", kind, "--root", str(root)]
    argv += ["--sessions", str(sessions)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory child {kind} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def child_main(kind: str, root: Path, sessions: int) -> None:
    configure_logging("WARNING")
    if kind == "memory-floor":
        result = memory_floor(root / "history.db", sessions)
    else:
        result = asyncio.run(memory_ours(root, sessions, trace=kind == "memory-trace"))
    print(json.dumps(result))


def per_session(run: dict[str, Any], sessions: int) -> dict[str, float]:
    return {
        "bytes_per_session": (run["rss_after"] - run["rss_before"]) / sessions,
        "objects_per_session": (run["objects_after"] - run["objects_before"]) / sessions,
        "rss_before_mib": run["rss_before"] / MIB,
        "rss_after_mib": run["rss_after"] / MIB,
        "touch_seconds": run["seconds"],
    }


async def bench_memory(root: Path, scale: Scale, trace: bool) -> dict[str, Any]:
    n = scale.idle_sessions
    floor_dir = root / "memory-floor"
    floor_dir.mkdir()
    await migrated(floor_dir / "history.db")
    ours = await asyncio.to_thread(run_child, "memory-ours", root / "memory-ours", n)
    floor = await asyncio.to_thread(run_child, "memory-floor", floor_dir, n)
    result: dict[str, Any] = {
        "sessions": n,
        "warm_up_sessions": WARM_SESSIONS,
        "ours": per_session(ours, n),
        "floor": per_session(floor, n),
    }
    result["ratio"] = ratio(
        result["ours"]["bytes_per_session"], result["floor"]["bytes_per_session"]
    )
    if trace:
        traced = await asyncio.to_thread(run_child, "memory-trace", root / "memory-trace", n)
        result["traced_sites"] = [
            {"site": site, "bytes_per_session": size / n, "blocks": count}
            for site, size, count in traced["sites"]
        ]
    return result


# -- 2. the temp-session reaper --------------------------------------------------------------


@dataclass
class ReaperHome:
    home: Path
    reapable: list[str]  # idle temp sessions with rows, and old folders without a row
    kept_rows: list[str]  # sessions (rows and folders) that must survive
    kept_folders: list[str]  # folders without a row that must survive
    busy: list[str]  # idle temp sessions another instance is running

    @property
    def db_path(self) -> Path:
        return bench_settings(self.home).store_dir / "history.db"

    @property
    def sessions_root(self) -> Path:
        return bench_settings(self.home).sessions_dir


async def seed_reaper_home(home: Path, n: int, seed: int) -> ReaperHome:
    rng = random.Random(seed)
    now = now_ms()
    idle = now - IDLE_MS
    idle_temp = uuid_ids("temp", n, rng)
    permanent = [
        *uuid_ids("cli", 3, rng),
        *uuid_ids("chat", 3, rng),
        "tg--1001234567",
        "dc-987654321098765432",
    ]
    fresh = uuid_ids("temp", 3, rng)
    busy = uuid_ids("temp", 2, rng)
    orphans_old = uuid_ids("temp", 3, rng)
    orphan_fresh = uuid_ids("temp", 1, rng)
    setup = ReaperHome(
        home,
        reapable=idle_temp + orphans_old,
        kept_rows=permanent + fresh + busy,
        kept_folders=orphan_fresh,
        busy=busy,
    )
    await migrated(setup.db_path)
    seeded = [Seeded(sid, idle) for sid in idle_temp]
    await asyncio.to_thread(seed_archive, setup.db_path, setup.sessions_root, seeded, "reapable")
    survivors = [Seeded(sid, idle) for sid in permanent + busy] + [Seeded(s, now) for s in fresh]
    await asyncio.to_thread(seed_archive, setup.db_path, setup.sessions_root, survivors, "keeper")
    old = (now - IDLE_MS) / 1000
    for sid in orphans_old + orphan_fresh:
        folder = setup.sessions_root / sid
        folder.mkdir(mode=0o700)
        (folder / "history.json").write_bytes(b"[\n]\n")
        if sid in orphans_old:
            os.utime(folder, (old, old))
    return setup


async def reap_ours(setup: ReaperHome) -> tuple[float, float, list[str]]:
    runtime = await Runtime.start(bench_settings(setup.home))
    try:
        for sid in setup.busy:
            # What another instance running one of the session's tasks keeps in the KV store.
            key = presence_key(sid, new_task_hash())
            await runtime.kv.set(key, json.dumps({"instance": "elsewhere"}), ttl=600)
        reaper = Reaper(
            runtime.store,
            runtime.kv,
            runtime.presence,
            runtime.router,
            runtime.settings.temp_idle_seconds,
        )
        reaped: list[str] = []

        async def job() -> None:
            reaped.extend(await reaper.run_once())

        started = time.perf_counter()
        await if_leading(runtime.leases, "job:cleanup", job)
        elapsed = time.perf_counter() - started
        await runtime.store.trash.settled()
        emptied = time.perf_counter() - started - elapsed
    finally:
        await runtime.close()
    return elapsed, emptied, reaped


def reap_floor(setup: ReaperHome, idle_seconds: float) -> tuple[float, float, float, list[str]]:
    """The same pass done the cheapest way: seconds in SQL, seconds taking the folders away (a
    rename each into a trash folder), seconds emptying the trash after, what went."""
    conn = bare_connect(setup.db_path)
    root = setup.sessions_root
    trash = root / ".trash"
    trash.mkdir()
    marks = ", ".join("?" for _ in setup.busy)
    try:
        started = time.perf_counter()
        cutoff = now_ms() - int(idle_seconds * 1000)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "CREATE TEMP TABLE doomed AS SELECT id FROM session WHERE id LIKE 'temp-%' "
            f"AND updated_at <= ? AND id NOT IN ({marks})",
            (cutoff, *setup.busy),
        )
        for table in PER_SESSION_TABLES:
            conn.execute(f"DELETE FROM {table.name} WHERE session_id IN (SELECT id FROM doomed)")
        conn.execute("DELETE FROM session WHERE id IN (SELECT id FROM doomed)")
        doomed = [row[0] for row in conn.execute("SELECT id FROM doomed")]
        conn.execute("COMMIT")
        with_rows = {row[0] for row in conn.execute("SELECT id FROM session")}
        sql_done = time.perf_counter()
        for sid in doomed:
            os.rename(root / sid, trash / sid)
        gone = set(doomed)
        for entry in os.scandir(root):
            name = entry.name
            if not name.startswith("temp-") or name in with_rows or name in gone:
                continue
            if entry.is_dir() and entry.stat().st_mtime * 1000 < cutoff:
                os.rename(entry.path, trash / name)
                doomed.append(name)
        folders_done = time.perf_counter()
        for entry in os.scandir(trash):
            shutil.rmtree(entry.path)
        emptied = time.perf_counter() - folders_done
        trash.rmdir()
        conn.execute("DROP TABLE doomed")
    finally:
        conn.close()
    return sql_done - started, folders_done - sql_done, emptied, doomed


def check_reaped(setup: ReaperHome, reaped: Sequence[str]) -> list[str]:
    """What is wrong with the home after a pass; empty when exactly the right things went."""
    problems: list[str] = []
    if sorted(reaped) != sorted(setup.reapable):
        missing = len(set(setup.reapable) - set(reaped))
        extra = len(set(reaped) - set(setup.reapable))
        problems.append(f"reported {len(reaped)} reaped: {missing} missing, {extra} unexpected")
    conn = bare_connect(setup.db_path)
    try:
        rows = sorted(row[0] for row in conn.execute("SELECT id FROM session"))
        if rows != sorted(setup.kept_rows):
            problems.append(f"{len(rows)} session rows left, expected {len(setup.kept_rows)}")
        for table in PER_SESSION_TABLES:
            (left,) = conn.execute(
                f"SELECT count(*) FROM {table.name} WHERE session_id NOT IN "
                "(SELECT id FROM session)"
            ).fetchone()
            if left:
                problems.append(f"{left} rows of {table.name} left without their session")
        # A kept session has two messages with the word (the question and its echo).
        for word, expected in (("reapable", 0), ("keeper", 2 * len(setup.kept_rows))):
            (found,) = conn.execute(
                "SELECT count(*) FROM messages_fts5 WHERE messages_fts5 MATCH ?", (f'"{word}"',)
            ).fetchone()
            if found != expected:
                problems.append(f"full-text index finds {found} '{word}' messages, not {expected}")
    finally:
        conn.close()
    folders = list_folders(setup.sessions_root)
    expected_folders = set(setup.kept_rows) | set(setup.kept_folders)
    if folders != expected_folders:
        problems.append(f"{len(folders)} folders left, expected {len(expected_folders)}")
    return problems


async def bench_reaper(root: Path, scale: Scale) -> dict[str, Any]:
    n = scale.reaper_sessions
    started = time.perf_counter()
    ours_home = await seed_reaper_home(root / "reaper-ours", n, SEED + 20)
    floor_home = await seed_reaper_home(root / "reaper-floor", n, SEED + 20)
    await asyncio.to_thread(flush_to_disk)
    log(f"two homes of {n:,} idle temp sessions seeded in {time.perf_counter() - started:.1f}s")
    idle_seconds = bench_settings(root).temp_idle_seconds
    floor_sql, floor_folders, floor_emptied, floor_reaped = await asyncio.to_thread(
        reap_floor, floor_home, idle_seconds
    )
    floor_s = floor_sql + floor_folders
    log(f"floor pass {floor_s:.2f}s; our pass ...")
    ours_s, ours_emptied, ours_reaped = await reap_ours(ours_home)
    reapable = len(ours_home.reapable)
    return {
        "idle_temp_sessions": n,
        "reapable": reapable,
        "kept": len(ours_home.kept_rows) + len(ours_home.kept_folders),
        "ours_seconds": ours_s,
        "floor_seconds": floor_s,
        "floor_sql_seconds": floor_sql,
        "floor_folders_seconds": floor_folders,
        # Giving the disk space back, after the pass and off its path.
        "ours_trash_seconds": ours_emptied,
        "floor_trash_seconds": floor_emptied,
        "ours_us_per_session": ours_s / reapable * 1e6,
        "floor_us_per_session": floor_s / reapable * 1e6,
        "ratio": ratio(ours_s, floor_s),
        "ours_problems": check_reaped(ours_home, ours_reaped),
        "floor_problems": check_reaped(floor_home, floor_reaped),
    }


# -- 3. start-up ---------------------------------------------------------------------------


@dataclass
class StartupHome:
    home: Path
    tasks: list[tuple[str, str, str]] = field(default_factory=list)  # sid, task hash, text
    folders: int = 0


async def journal_tasks(home: Path, count: int) -> list[tuple[str, str, str]]:
    """Unfinished tasks as the intake leaves them before they run: the user's message and the
    task's journal, archived in one transaction."""
    store = await SessionStore.open(bench_settings(home))
    tasks: list[tuple[str, str, str]] = []
    try:
        for k in range(count):
            sid, task_hash, text = f"cli-resume{k}", new_task_hash(), f"resume {k}"
            submitted = now_ms()

            def journal(
                stored: StoredMessage,
                sid: str = sid,
                task_hash: str = task_hash,
                at: int = submitted,
            ) -> Any:
                head = JournalHead(
                    sid, task_hash, ANN, stored.content, stored.id, stored.send_at, at
                )
                return head.record()

            await store.take_in(sid, text, sender="Ann", task_hash=task_hash, journal=journal)
            tasks.append((sid, task_hash, text))
    finally:
        await store.close()
    return tasks


async def seed_startup_home(home: Path, folders: int, tasks: int, seed: int) -> StartupHome:
    settings = bench_settings(home)
    await migrated(settings.store_dir / "history.db")
    setup = StartupHome(home)
    others = folders - tasks if folders else 0
    if others > 0:
        rng = random.Random(seed)
        quarter = others // 4
        ids = [
            *uuid_ids("cli", quarter, rng),
            *uuid_ids("chat", quarter, rng),
            *(f"tg--100{k:010d}" for k in range(quarter)),
            *(f"dc-{rng.getrandbits(62)}" for _ in range(others - 3 * quarter)),
        ]
        base = now_ms() - 30 * 86_400_000
        seeded = [Seeded(sid, base + k) for k, sid in enumerate(ids)]
        await asyncio.to_thread(
            seed_archive,
            settings.store_dir / "history.db",
            settings.sessions_dir,
            seeded,
            "startup",
        )
    setup.tasks = await journal_tasks(home, tasks) if tasks else []
    setup.folders = (
        len(list_folders(settings.sessions_dir)) if settings.sessions_dir.is_dir() else 0
    )
    return setup


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_gateway(setup: StartupHome) -> dict[str, Any]:
    """`agenvoy run` on the home: seconds from exec to /healthz 200, to the "gateway ready"
    line (recovery done) and to every unfinished task finished."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENVOY_")}
    env |= {
        "AGENVOY_HOME": str(setup.home),
        "AGENVOY_HTTP_PORT": str(port),
        "AGENVOY_INSTANCE_ID": BENCH_INSTANCE,
        "AGENVOY_LOG_FORMAT": "json",
        "AGENVOY_LOG_LEVEL": "INFO",
    }
    ready = asyncio.Event()
    result: dict[str, Any] = {"folders": setup.folders, "tasks": len(setup.tasks)}
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        EXE,
        "run",
        env=env,
        cwd=setup.home,  # no stray .env
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )

    async def read_log() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            with contextlib.suppress(ValueError):
                line = json.loads(raw)
                if line.get("event") == "gateway ready" and not ready.is_set():
                    result["ready_seconds"] = time.perf_counter() - started
                    result["resumed"] = line.get("resumed")
                    ready.set()
        ready.set()  # the process ended: nothing more to wait for

    async def healthy(http: aiohttp.ClientSession) -> None:
        while proc.returncode is None:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with http.get(url + "/healthz") as resp:
                    if resp.status == 200:
                        result["healthz_seconds"] = time.perf_counter() - started
                        return
            # The port is closed until the HTTP server is up; this sets the resolution.
            await asyncio.sleep(0.005)
        raise RuntimeError("agenvoy run exited before answering /healthz")

    async def finished(http: aiohttp.ClientSession, sid: str, task_hash: str, text: str) -> None:
        async with http.get(f"{url}/v1/session/{sid}/task/{task_hash}?wait=300") as resp:
            body = await resp.json()
        if (
            resp.status != 200
            or body.get("status") != "done"
            or body.get("text") != f"echo: {text}"
        ):
            raise RuntimeError(f"task {task_hash} of {sid}: {resp.status} {body}")

    reader = asyncio.create_task(read_log())
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=310)) as http:

            async def everything() -> None:
                await healthy(http)
                await ready.wait()
                if proc.returncode is not None:
                    raise RuntimeError("agenvoy run exited before it was ready")
                await asyncio.gather(*(finished(http, *task) for task in setup.tasks))
                result["tasks_done_seconds"] = time.perf_counter() - started

            await asyncio.wait_for(everything(), START_TIMEOUT_SECONDS)
    finally:
        if proc.returncode is None:
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        await reader
    if not setup.tasks:
        result["tasks_done_seconds"] = result["ready_seconds"]
    return result


async def bench_startup(root: Path, scale: Scale) -> dict[str, Any]:
    n = scale.startup_folders
    started = time.perf_counter()
    big = await seed_startup_home(root / "start-big", n, UNFINISHED_TASKS, SEED + 30)
    tasks_only = await seed_startup_home(root / "start-tasks", 0, UNFINISHED_TASKS, SEED + 31)
    empty = [await seed_startup_home(root / f"start-empty{i}", 0, 0, SEED) for i in range(4)]
    await asyncio.to_thread(flush_to_disk)
    log(f"home of {big.folders:,} folders seeded in {time.perf_counter() - started:.1f}s")
    # Untimed: the first start of the run reads the interpreter and libraries from disk.
    await start_gateway(empty[0])
    # The floor runs between and around the others, so a slow patch of the machine shows in
    # it as well; its median is the one compared.
    floor_runs = [await start_gateway(empty[1])]
    only_tasks = await start_gateway(tasks_only)
    floor_runs.append(await start_gateway(empty[2]))
    ours = await start_gateway(big)
    floor_runs.append(await start_gateway(empty[3]))
    floor = {
        key: statistics.median(run[key] for run in floor_runs)
        for key in ("healthz_seconds", "ready_seconds")
    }
    return {
        "folders": big.folders,
        "unfinished_tasks": UNFINISHED_TASKS,
        "ours": ours,
        "tasks_only": only_tasks,
        "floor": floor,
        "floor_runs": floor_runs,
        "ratio_healthz": ratio(ours["healthz_seconds"], floor["healthz_seconds"]),
        "ratio_tasks_done": ratio(ours["tasks_done_seconds"], floor["healthz_seconds"]),
    }


# -- 4. full-text search -------------------------------------------------------------------


async def bench_fts(root: Path, scale: Scale) -> dict[str, Any]:
    sizes = replace(store_bench.FULL, fts_messages=scale.fts_messages, queries=scale.fts_queries)
    folder = root / "fts-scale"
    folder.mkdir()
    result: dict[str, Any] = await store_bench.bench_fts(
        folder, sizes, store_bench.TextMaker(store_bench.SEED + 3)
    )
    return result


# -- report --------------------------------------------------------------------------------


def verdict(met: bool, quick: bool) -> str:
    if quick:
        return "n/a at --quick sizes"
    return "met" if met else "MISSED"


def render(results: dict[str, Any]) -> str:
    meta = results["meta"]
    quick = meta["mode"] == "quick"
    out = [
        f"store at scale ({meta['mode']}; python {meta['python']}, sqlite {meta['sqlite']}, "
        f"{meta['seconds']:.0f}s; load average {meta['load_average_before']:.1f} -> "
        f"{meta['load_average_after']:.1f} on {meta['cpus']} CPUs)",
        "ours vs a floor measured in this same run; absolute numbers vary with the machine.",
    ]
    m = results.get("memory")
    if m:
        ours, floor = m["ours"], m["floor"]
        met = ours["bytes_per_session"] <= GOAL_BYTES_PER_SESSION
        out += [
            "",
            f"1. memory per idle session  ({m['sessions']:,} sessions touched after "
            f"{m['warm_up_sessions']} warm-up ones; RSS after gc.collect)",
            f"   {'':<44}{'B/session':>11}{'objects/s.':>12}{'RSS MiB':>16}",
        ]
        for label, row in (
            ("ours: Runtime, Router.record + settings read", ours),
            ("floor: bare sqlite3, one connection", floor),
        ):
            rss = f"{row['rss_before_mib']:.0f} -> {row['rss_after_mib']:.0f}"
            out.append(
                f"   {label:<44}{row['bytes_per_session']:>11,.0f}"
                f"{row['objects_per_session']:>12.1f}{rss:>16}"
            )
        out.append(
            f"   ratio ours/floor {m['ratio']:.1f}; goal <= {GOAL_BYTES_PER_SESSION:,} B: "
            f"{verdict(met, quick)}"
        )
        for site in m.get("traced_sites", []):
            out.append(f"     traced: {site['bytes_per_session']:>7.0f} B/session  {site['site']}")
    r = results.get("reaper")
    if r:
        met = r["ratio"] <= GOAL_REAPER_RATIO and not r["ours_problems"]
        out += [
            "",
            f"2. temp-session reaper, one pass  ({r['idle_temp_sessions']:,} idle temp sessions "
            f"with rows and folders; {r['reapable']:,} to reap, {r['kept']} to keep)",
            f"   {'':<44}{'seconds':>11}{'µs/session':>12}",
            f"   {'ours: Reaper.run_once under its lease':<44}{r['ours_seconds']:>11.2f}"
            f"{r['ours_us_per_session']:>12.0f}",
            f"   {'floor: DELETE ... IN + rename to a trash':<44}{r['floor_seconds']:>11.2f}"
            f"{r['floor_us_per_session']:>12.0f}",
            f"     {'of which SQL / folders':<42}{r['floor_sql_seconds']:>11.2f}"
            f"{r['floor_folders_seconds']:>12.2f} s",
            f"   {'then emptying the trash: ours / floor':<44}{r['ours_trash_seconds']:>11.2f}"
            f"{r['floor_trash_seconds']:>12.2f} s",
            f"   ratio ours/floor {r['ratio']:.2f}; goal <= {GOAL_REAPER_RATIO}x: "
            f"{verdict(met, quick)}",
        ]
        for who in ("ours", "floor"):
            problems = r[f"{who}_problems"]
            found = "; ".join(problems) if problems else "ok, exactly the idle temp ones went"
            out.append(f"   {who} check: {found}")
    s = results.get("startup")
    if s:
        ours, floor, only = s["ours"], s["floor"], s["tasks_only"]
        met = ours["tasks_done_seconds"] < GOAL_STARTUP_SECONDS
        out += [
            "",
            f"3. start-up, exec of `agenvoy run` to ...  ({s['folders']:,} session folders, "
            f"{s['unfinished_tasks']} unfinished tasks)",
            f"   {'':<44}{'/healthz':>10}{'ready':>10}{'tasks done':>12}",
            f"   {'ours: the big home':<44}{ours['healthz_seconds']:>10.2f}"
            f"{ours['ready_seconds']:>10.2f}{ours['tasks_done_seconds']:>12.2f}",
            f"   {'the 10 tasks alone':<44}{only['healthz_seconds']:>10.2f}"
            f"{only['ready_seconds']:>10.2f}{only['tasks_done_seconds']:>12.2f}",
            f"   {'floor: empty home (median of 3)':<44}{floor['healthz_seconds']:>10.2f}"
            f"{floor['ready_seconds']:>10.2f}",
            f"   tasks taken up at start: {ours['resumed']} and {only['resumed']} of "
            f"{s['unfinished_tasks']}, each read back done with its echo",
            f"   ratio ours/floor (/healthz) {s['ratio_healthz']:.1f}, tasks done / floor "
            f"/healthz {s['ratio_tasks_done']:.1f}; goal < {GOAL_STARTUP_SECONDS:.0f} s to the "
            f"tasks done: {verdict(met, quick)}",
        ]
    f = results.get("fts")
    if f:
        met = f["ours_p99_ms"] < GOAL_FTS_P99_MS
        out += [
            "",
            f"4. full-text search, limit 20  ({f['messages']:,} messages, "
            f"{f['db_bytes'] / MIB:.0f} MiB, loaded in {f['fill_seconds']:.0f}s; "
            f"{f['queries']} queries, every kind of store_bench.py)",
            f"   {'':<44}{'p50 ms':>10}{'p99 ms':>10}",
            f"   {'ours: Search.messages, all queries':<44}{f['ours_p50_ms']:>10.2f}"
            f"{f['ours_p99_ms']:>10.2f}",
            f"   {'ours: the trigram-only queries':<44}{f['ours_fts_only_p50_ms']:>10.2f}"
            f"{f['ours_fts_only_p99_ms']:>10.2f}",
            f"   {'floor: bare sqlite3 MATCH, same queries':<44}{f['floor_p50_ms']:>10.2f}"
            f"{f['floor_p99_ms']:>10.2f}",
            f"   ratio ours/floor p50 {f['ratio_p50']:.2f}, p99 {f['ratio_p99']:.2f}, median "
            f"per query {f['ratio_median_per_query']:.2f}; goal p99 < {GOAL_FTS_P99_MS:.0f} ms: "
            f"{verdict(met, quick)}",
        ]
        slowest = max(f["by_kind"].items(), key=lambda item: item[1]["p99_ms"])
        out.append(f"   slowest kind: {slowest[0]}, p99 {slowest[1]['p99_ms']:.2f} ms")
        if f["floor_hit_count_mismatches"]:
            out.append(
                f"   WARNING: {f['floor_hit_count_mismatches']} hit counts differ from the floor"
            )
    return "\n".join(out)


async def run_parts(root: Path, scale: Scale, parts: Sequence[str], trace: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if "memory" in parts:
        log("1. memory per idle session")
        results["memory"] = await bench_memory(root, scale, trace)
    if "reaper" in parts:
        log("2. reaper")
        results["reaper"] = await bench_reaper(root, scale)
    if "startup" in parts:
        log("3. start-up")
        results["startup"] = await bench_startup(root, scale)
    if "fts" in parts:
        log("4. full-text search")
        results["fts"] = await bench_fts(root, scale)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke check")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the numbers here")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"which parts, comma-separated: {','.join(PARTS)}"
    )
    parser.add_argument(
        "--trace-memory", action="store_true", help="name the lines holding idle sessions' memory"
    )
    parser.add_argument(
        "--reaper-sessions", type=int, metavar="N", help="idle temp sessions for the reaper part"
    )
    parser.add_argument(
        "--child", choices=("memory-ours", "memory-floor", "memory-trace"), help=argparse.SUPPRESS
    )
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args.child, args.root, args.sessions)
        return 0

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    configure_logging("WARNING")
    scale = QUICK if args.quick else FULL
    if args.reaper_sessions:
        scale = replace(scale, reaper_sessions=args.reaper_sessions)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agenvoy-scale-") as tmp:
        results = asyncio.run(run_parts(Path(tmp), scale, parts, args.trace_memory))
    results["meta"] = {
        "mode": "quick" if args.quick else "full",
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "seconds": time.perf_counter() - started,
        # What else the machine was doing: a busy neighbour shows in every p99.
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "scale": asdict(scale),
        "parts": parts,
        "goals": {
            "bytes_per_session_at_most": GOAL_BYTES_PER_SESSION,
            "reaper_ratio_at_most": GOAL_REAPER_RATIO,
            "startup_seconds_below": GOAL_STARTUP_SECONDS,
            "fts_p99_ms_below": GOAL_FTS_P99_MS,
        },
    }
    print(render(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
