"""Store benchmark: our costs as ratios against floors measured in the same run.

    .venv/bin/python bench/store_bench.py [--quick] [--json PATH]

Sections (see bench/README.md for what each number means):

1. history.json append: median per-append time on an empty file vs a ~4 MiB one.
2. Message inserts/s through SessionStore.append_message (SQL + history.json) and through
   Database.write alone (SQL only).
3. The floor for 2: a bare sqlite3 loop, one commit per message, same pragmas, same schema.
4. Full-text search latency (p50/p99) through Search.messages over a large archive, against
   the same MATCH queries run with bare sqlite3.

Everything lives under one temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gateway.logs import configure_logging
from gateway.settings import Settings
from gateway.store.db import Database
from gateway.store.history_file import HistoryFile, HistoryMessage
from gateway.store.search import Search
from gateway.store.sessions import SessionStore
from gateway.store.sqlite_setup import sqlite_pragmas

MIB = 1024 * 1024
HISTORY_FILL_BYTES = 4 * MIB
HISTORY_MAX_BYTES = 64 * MIB  # far above what the benchmark writes: trimming never runs
HISTORY_TARGET_RATIO = 3.0
SEED = 20240611

Row = tuple[str, str, int]  # session id, content, send_at


@dataclass(frozen=True)
class Scale:
    history_appends: int
    inserts: int
    insert_chunk: int  # messages per variant per interleaved round
    fts_messages: int
    fts_sessions: int
    queries: int


FULL = Scale(
    history_appends=2000,
    inserts=3000,
    insert_chunk=50,
    fts_messages=200_000,
    fts_sessions=50,
    queries=200,
)
QUICK = Scale(
    history_appends=500,
    inserts=500,
    insert_chunk=50,
    fts_messages=20_000,
    fts_sessions=50,
    queries=120,
)


# -- synthetic text ------------------------------------------------------------------------

# Ordered roughly by how often they appear: early words are common, late ones less so.
_VOCABULARY = (
    "the and you that have for not with this but from they say her she will one all would "
    "there their what out about who get which when make can like time just him know take "
    "people into year your good some could them see other than then now look only come its "
    "over think also back after use two how our work first well way even new want because "
    "any these give day most message session search archive history window agent reply "
    "model token server client request response channel thread summary cursor backend "
    "prompt context memory index trigram query result limit offset commit transaction "
    "journal checkpoint writer reader lock timeout retry gateway adapter discord telegram "
    "terminal webhook payload schema migration column table vacuum analyze latency "
    "throughput budget deadline rollout feature review deploy monitor alert incident"
)
WORDS = tuple(_VOCABULARY.split())
# Each appears in roughly one message in twenty thousand.
RARE_WORDS = ("quokkaesque", "zanzibarite", "xylographer", "fjordwalker", "pumpernickelry")
RARE_RATE = 1 / 20_000
CJK_PHRASES = (
    "数据库连接失败",
    "搜索引擎的索引",
    "会话记录已保存",
    "今天天气很好",
    "请帮我总结一下",
    "全文检索功能",
    "消息历史太长了",
    "検索できます",
    "データベースの移行",
    "会議の議事録",
    "明日の天気予報",
    "ファイルを保存しました",
)
CJK_RATE = 0.2
CJK_SHORT = ("数据", "会话", "天気", "検索", "历史", "移行")
CJK_LONG = ("数据库", "搜索引擎", "会话记录", "検索でき", "全文检索", "データベース")
HOSTILE = ('NEAR("x*', "content:(x", ')))"""', "^AND*", '"OR" NOT', "col:NEAR(a b)")


class TextMaker:
    """Deterministic synthetic chat messages: Zipf-ish English, some CJK, a few rare words."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.weights = [1.0 / (rank + 1) for rank in range(len(WORDS))]
        self.cum = list(_accumulate(self.weights))

    def sentence(self, target_len: int) -> str:
        rng = self.rng
        parts: list[str] = []
        length = 0
        if rng.random() < CJK_RATE:
            phrase = rng.choice(CJK_PHRASES)
            parts.append(phrase)
            length += len(phrase.encode())
        while length < target_len:
            # Draw words in batches (one call is much cheaper than one per word).
            for word in rng.choices(WORDS, cum_weights=self.cum, k=16):
                parts.append(word)
                length += len(word) + 1
                if length >= target_len:
                    break
        if rng.random() < RARE_RATE * len(RARE_WORDS):
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(RARE_WORDS))
        return " ".join(parts)


def _accumulate(values: Sequence[float]) -> list[float]:
    total = 0.0
    out = []
    for value in values:
        total += value
        out.append(total)
    return out


# -- small helpers -------------------------------------------------------------------------


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def ratio(ours: float, floor: float) -> float:
    return ours / floor if floor > 0 else float("inf")


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def bare_connect(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection set up like ours: same pragmas, explicit transactions."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in sqlite_pragmas():
        conn.execute(pragma)
    return conn


def quote_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


async def migrated_db_file(path: Path) -> None:
    """Create `path` with exactly our schema (tables, FTS5 table, triggers) by migrating it."""
    db = await Database.open(sqlite_url(path))
    await db.close()


def log(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


# -- 1. history.json append ----------------------------------------------------------------


def bench_history(root: Path, scale: Scale, text: TextMaker) -> dict[str, Any]:
    small_dir = root / "history-empty"
    big_dir = root / "history-4mib"
    small_dir.mkdir()
    big_dir.mkdir()
    small = HistoryFile(small_dir / "history.json", max_bytes=HISTORY_MAX_BYTES)
    big = HistoryFile(big_dir / "history.json", max_bytes=HISTORY_MAX_BYTES)

    # Fill the big file in one rewrite: ~200-byte messages up to ~4 MiB.
    filler: list[HistoryMessage] = []
    size = 4
    at = 1_700_000_000_000
    while size < HISTORY_FILL_BYTES:
        message = HistoryMessage("user", text.sentence(150), at, "bench")
        filler.append(message)
        size += len(message.to_json()) + 2
        at += 1
    big.replace(filler)
    small.replace([])
    fill_bytes = big.path.stat().st_size

    appends = scale.history_appends
    messages = [
        HistoryMessage("assistant", text.sentence(150), at + i, "agent") for i in range(appends)
    ]
    avg_bytes = statistics.fmean(len(m.to_json()) for m in messages)
    reset_every = 250  # keep the "empty" file near empty; the reset itself is not timed

    for message in messages[:20]:  # warm-up, untimed
        small.append(message)
        big.append(message)
    small.replace([])

    small_ns: list[int] = []
    big_ns: list[int] = []
    clock = time.perf_counter_ns
    gc.collect()
    gc.disable()
    try:
        for i, message in enumerate(messages):
            if i and i % reset_every == 0:
                small.replace([])
            # Alternate which file goes first so neither always gets the warmer cache.
            order = (
                ((small, small_ns), (big, big_ns))
                if i % 2 == 0
                else ((big, big_ns), (small, small_ns))
            )
            for history, sink in order:
                start = clock()
                history.append(message)
                sink.append(clock() - start)
    finally:
        gc.enable()

    small_med = statistics.median(small_ns) / 1000
    big_med = statistics.median(big_ns) / 1000
    return {
        "appends_each": appends,
        "message_bytes_avg": round(avg_bytes, 1),
        "big_file_bytes_before": fill_bytes,
        "big_file_bytes_after": big.path.stat().st_size,
        "empty_median_us": small_med,
        "empty_p90_us": percentile(small_ns, 90) / 1000,
        "big_median_us": big_med,
        "big_p90_us": percentile(big_ns, 90) / 1000,
        "ratio_big_over_empty": ratio(big_med, small_med),
        "target_ratio_below": HISTORY_TARGET_RATIO,
    }


# -- 2 and 3. inserts/s --------------------------------------------------------------------


@dataclass
class InsertVariant:
    name: str
    run: Callable[[Sequence[Row]], Awaitable[int]]  # inserts the rows, returns elapsed ns
    elapsed_ns: int = 0
    done: int = 0

    @property
    def per_second(self) -> float:
        return self.done / (self.elapsed_ns / 1e9) if self.elapsed_ns else 0.0


def bare_insert_chunk(conn: sqlite3.Connection, rows: Sequence[Row], *, touch: bool) -> int:
    """One transaction per message with bare sqlite3; returns the elapsed nanoseconds."""
    clock = time.perf_counter_ns
    start = clock()
    for sid, content, at in rows:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO messages (session_id, role, content, sender, send_at, task_hash) "
            "VALUES (?, 'user', ?, 'bench', ?, '')",
            (sid, content, at),
        )
        if touch:
            conn.execute(
                "UPDATE session SET updated_at = MAX(updated_at, ?) WHERE id = ?", (at, sid)
            )
        conn.execute("COMMIT")
    return clock() - start


async def open_store(home: Path) -> SessionStore:
    url = sqlite_url(home / "history.db")
    settings = Settings(home=home, database_url=url, history_max_bytes=HISTORY_MAX_BYTES)
    return SessionStore(settings, await Database.open(url))


async def bench_inserts(root: Path, scale: Scale, text: TextMaker) -> dict[str, Any]:
    n = scale.inserts
    sessions = [f"chat-bench{i}" for i in range(10)]
    base = 1_700_000_000_000
    rows = [(sessions[i % len(sessions)], text.sentence(170), base + i) for i in range(n)]

    # Ours, the whole path: SQL row + history.json line.
    full_store = await open_store(root / "ins-full")
    # Ours, SQL only: the transaction append_message runs, through Database.write.
    sql_store = await open_store(root / "ins-sql")
    for store in (full_store, sql_store):
        for sid in sessions:
            await store.ensure(sid)

    # Floors: fresh files migrated by us (identical triggers), then bare sqlite3.
    floor_conns: dict[str, sqlite3.Connection] = {}
    for key in ("floor-insert", "floor-touch"):
        path = root / key / "history.db"
        path.parent.mkdir()
        await migrated_db_file(path)
        conn = bare_connect(path)
        conn.executemany(
            "INSERT INTO session (id, created_at, updated_at) VALUES (?, ?, ?)",
            [(sid, base, base) for sid in sessions],
        )
        floor_conns[key] = conn

    async def run_full(chunk: Sequence[Row]) -> int:
        start = time.perf_counter_ns()
        for sid, content, at in chunk:
            await full_store.append_message(sid, "user", content, sender="bench", send_at=at)
        return time.perf_counter_ns() - start

    async def run_sql(chunk: Sequence[Row]) -> int:
        start = time.perf_counter_ns()
        for sid, content, at in chunk:
            await sql_store.append_message(
                sid, "user", content, sender="bench", send_at=at, write_history=False
            )
        return time.perf_counter_ns() - start

    async def run_floor_insert(chunk: Sequence[Row]) -> int:
        return await asyncio.to_thread(
            bare_insert_chunk, floor_conns["floor-insert"], chunk, touch=False
        )

    async def run_floor_touch(chunk: Sequence[Row]) -> int:
        return await asyncio.to_thread(
            bare_insert_chunk, floor_conns["floor-touch"], chunk, touch=True
        )

    variants = [
        InsertVariant("ours: append_message (SQL + history.json)", run_full),
        InsertVariant("ours: Database.write only (SQL)", run_sql),
        InsertVariant("floor: sqlite3 INSERT + COMMIT", run_floor_insert),
        InsertVariant("floor: sqlite3 INSERT + session UPDATE + COMMIT", run_floor_touch),
    ]

    # One untimed message each first: our stack's first call pays for statement compilation,
    # and every connection's first write for opening the WAL.
    warm = [(sessions[0], "warm up message", base - 1)]
    for variant in variants:
        await variant.run(warm)

    # Rounds: each variant inserts a chunk in turn, in rotating order, so a noisy neighbour
    # hits all of them alike; every variant ends with the same number of rows.
    rounds = max(1, n // scale.insert_chunk)
    bounds = [n * r // rounds for r in range(rounds + 1)]
    for r in range(rounds):
        chunk = rows[bounds[r] : bounds[r + 1]]
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for variant in order:
            variant.elapsed_ns += await variant.run(chunk)
            variant.done += len(chunk)

    for store in (full_store, sql_store):
        await store.close()
    for conn in floor_conns.values():
        conn.close()

    full, sql, floor_insert, floor_touch = variants
    return {
        "messages": n,
        "rounds": rounds,
        "rates_per_s": {v.name: v.per_second for v in variants},
        "ours_full_per_s": full.per_second,
        "ours_sql_per_s": sql.per_second,
        "floor_insert_per_s": floor_insert.per_second,
        "floor_touch_per_s": floor_touch.per_second,
        "ours_full_us_per_msg": full.elapsed_ns / full.done / 1000,
        "ours_sql_us_per_msg": sql.elapsed_ns / sql.done / 1000,
        "floor_insert_us_per_msg": floor_insert.elapsed_ns / floor_insert.done / 1000,
        "floor_touch_us_per_msg": floor_touch.elapsed_ns / floor_touch.done / 1000,
        # Slowdown factors (time per message, ours / floor).
        "ratio_full_over_floor_insert": ratio(floor_insert.per_second, full.per_second),
        "ratio_sql_over_floor_insert": ratio(floor_insert.per_second, sql.per_second),
        "ratio_full_over_floor_touch": ratio(floor_touch.per_second, full.per_second),
        "ratio_sql_over_floor_touch": ratio(floor_touch.per_second, sql.per_second),
        # What append_message adds on top of its SQL transaction (history.json line + the
        # thread hop that writes it); noise can make it slightly negative.
        "history_extra_us_per_msg": (full.elapsed_ns / full.done - sql.elapsed_ns / sql.done)
        / 1000,
        "history_share_of_full": 1 - ratio(sql.elapsed_ns / sql.done, full.elapsed_ns / full.done),
    }


# -- 4. FTS query latency ------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    kind: str
    text: str

    @property
    def floor_eligible(self) -> bool:
        # The floor covers queries served by the trigram index alone: every term >= 3 chars.
        terms = self.text.split()
        return bool(terms) and all(len(t) >= 3 for t in terms)

    def match_expr(self) -> str:
        return " AND ".join(quote_phrase(t) for t in self.text.split())


def make_queries(count: int, rng: random.Random) -> list[Query]:
    common = [w for w in WORDS[:12] if len(w) >= 3]
    mid = [w for w in WORDS[40:] if len(w) >= 4]
    makers: list[tuple[str, Callable[[], str]]] = [
        ("common word", lambda: rng.choice(common)),
        ("two words", lambda: f"{rng.choice(mid)} {rng.choice(mid)}"),
        ("rare word", lambda: rng.choice(RARE_WORDS)),
        ("cjk 2-char", lambda: rng.choice(CJK_SHORT)),
        ("cjk 3+ char", lambda: rng.choice(CJK_LONG)),
        ("hostile", lambda: rng.choice(HOSTILE)),
    ]
    queries = []
    for i in range(count):
        kind, make = makers[i % len(makers)]
        queries.append(Query(kind, make()))
    return queries


# The same statement our search issues, so the ratio is the cost of our layers alone.
FLOOR_SQL = (
    "SELECT m.id, m.session_id, m.role, m.content, m.sender, m.send_at "
    "FROM messages_fts5 f CROSS JOIN messages m ON m.id = f.rowid "
    "WHERE messages_fts5 MATCH ? ORDER BY f.rowid DESC LIMIT 20"
)


def fill_archive(path: Path, scale: Scale, text: TextMaker) -> float:
    """Bulk-load the archive in one transaction; the triggers fill the FTS5 index."""
    start = time.perf_counter()
    conn = bare_connect(path)
    sessions = [f"chat-fts{i}" for i in range(scale.fts_sessions)]
    base = 1_600_000_000_000
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO session (id, created_at, updated_at) VALUES (?, ?, ?)",
        [(sid, base, base) for sid in sessions],
    )
    roles = ("user", "assistant")
    rng = text.rng

    def rows() -> Iterator[tuple[str, str, str, str, int]]:
        for i in range(scale.fts_messages):
            yield (
                sessions[rng.randrange(len(sessions))],
                roles[i % 2],
                text.sentence(rng.randint(40, 220)),
                "bench",
                base + i * 1000,
            )

    conn.executemany(
        "INSERT INTO messages (session_id, role, content, sender, send_at, task_hash) "
        "VALUES (?, ?, ?, ?, ?, '')",
        rows(),
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.perf_counter() - start


def floor_query(conn: sqlite3.Connection, match: str) -> tuple[int, int]:
    start = time.perf_counter_ns()
    found = conn.execute(FLOOR_SQL, (match,)).fetchall()
    return time.perf_counter_ns() - start, len(found)


async def bench_fts(root: Path, scale: Scale, text: TextMaker) -> dict[str, Any]:
    path = root / "fts" / "history.db"
    path.parent.mkdir()
    await migrated_db_file(path)
    fill_s = await asyncio.to_thread(fill_archive, path, scale, text)
    log(f"archive of {scale.fts_messages:,} messages loaded in {fill_s:.1f}s")

    db = await Database.open(sqlite_url(path))
    search = Search(db)
    floor_conn = bare_connect(path)
    queries = make_queries(scale.queries, random.Random(SEED + 4))

    # Warm-up: one of each kind through both paths, untimed.
    seen: set[str] = set()
    for q in queries:
        if q.kind not in seen:
            seen.add(q.kind)
            await search.messages(q.text, limit=20)
            if q.floor_eligible:
                await asyncio.to_thread(floor_query, floor_conn, q.match_expr())

    ours_ms: list[float] = []
    by_kind: dict[str, list[float]] = {}
    hits_by_kind: dict[str, list[int]] = {}
    pair_ours: list[float] = []
    pair_floor: list[float] = []
    mismatches = 0
    for i, q in enumerate(queries):
        floor_ms = None
        floor_hits = -1
        if q.floor_eligible and i % 2 == 1:  # alternate which path runs first
            ns, floor_hits = await asyncio.to_thread(floor_query, floor_conn, q.match_expr())
            floor_ms = ns / 1e6
        start = time.perf_counter_ns()
        hits = await search.messages(q.text, limit=20)
        took = (time.perf_counter_ns() - start) / 1e6
        if q.floor_eligible and i % 2 == 0:
            ns, floor_hits = await asyncio.to_thread(floor_query, floor_conn, q.match_expr())
            floor_ms = ns / 1e6
        ours_ms.append(took)
        by_kind.setdefault(q.kind, []).append(took)
        hits_by_kind.setdefault(q.kind, []).append(len(hits))
        if floor_ms is not None:
            pair_ours.append(took)
            pair_floor.append(floor_ms)
            if floor_hits != len(hits):
                mismatches += 1

    await db.close()
    floor_conn.close()

    kinds = {
        kind: {
            "queries": len(samples),
            "p50_ms": percentile(samples, 50),
            "p99_ms": percentile(samples, 99),
            "avg_hits": statistics.fmean(hits_by_kind[kind]),
        }
        for kind, samples in by_kind.items()
    }
    per_query = [ratio(o, f) for o, f in zip(pair_ours, pair_floor, strict=True)]
    return {
        "messages": scale.fts_messages,
        "sessions": scale.fts_sessions,
        "fill_seconds": fill_s,
        "db_bytes": path.stat().st_size,
        "queries": len(queries),
        "ours_p50_ms": percentile(ours_ms, 50),
        "ours_p99_ms": percentile(ours_ms, 99),
        "by_kind": kinds,
        "floor_queries": len(pair_floor),
        "floor_hit_count_mismatches": mismatches,
        "ours_fts_only_p50_ms": percentile(pair_ours, 50),
        "ours_fts_only_p99_ms": percentile(pair_ours, 99),
        "floor_p50_ms": percentile(pair_floor, 50),
        "floor_p99_ms": percentile(pair_floor, 99),
        "ratio_p50": ratio(percentile(pair_ours, 50), percentile(pair_floor, 50)),
        "ratio_p99": ratio(percentile(pair_ours, 99), percentile(pair_floor, 99)),
        "ratio_median_per_query": statistics.median(per_query),
    }


# -- report --------------------------------------------------------------------------------


def render(results: dict[str, Any]) -> str:
    out: list[str] = []
    meta = results["meta"]
    out.append(
        f"store benchmark ({meta['mode']}; python {meta['python']}, sqlite {meta['sqlite']}, "
        f"{meta['seconds']:.1f}s)"
    )
    out.append("ratios compare against floors measured in this same run; absolute times vary.")

    h = results["history_append"]
    out.append("")
    out.append(
        f"1. history.json append  ({h['appends_each']:,} timed appends each, "
        f"~{h['message_bytes_avg']:.0f} B/message, interleaved)"
    )
    out.append(f"   {'file':<34}{'median µs':>12}{'p90 µs':>12}")
    out.append(f"   {'empty':<34}{h['empty_median_us']:>12.1f}{h['empty_p90_us']:>12.1f}")
    big = f"~{h['big_file_bytes_before'] / MIB:.1f} MiB"
    out.append(f"   {big:<34}{h['big_median_us']:>12.1f}{h['big_p90_us']:>12.1f}")
    verdict = "ok" if h["ratio_big_over_empty"] < h["target_ratio_below"] else "ABOVE TARGET"
    out.append(
        f"   ratio big/empty: {h['ratio_big_over_empty']:.2f}  "
        f"(target < {h['target_ratio_below']:.0f}: {verdict})"
    )

    s = results["inserts"]
    out.append("")
    out.append(
        f"2-3. message inserts, one transaction each, with FTS5 triggers  "
        f"({s['messages']:,} messages per variant, {s['rounds']} interleaved rounds)"
    )
    out.append(f"   {'variant':<52}{'msg/s':>10}{'µs/msg':>10}")
    rows = (
        (
            "ours: append_message (SQL + history.json)",
            s["ours_full_per_s"],
            s["ours_full_us_per_msg"],
        ),
        ("ours: Database.write only (SQL)", s["ours_sql_per_s"], s["ours_sql_us_per_msg"]),
        ("floor: sqlite3 INSERT + COMMIT", s["floor_insert_per_s"], s["floor_insert_us_per_msg"]),
        (
            "floor: sqlite3 INSERT + session UPDATE + COMMIT",
            s["floor_touch_per_s"],
            s["floor_touch_us_per_msg"],
        ),
    )
    for name, rate, us in rows:
        out.append(f"   {name:<52}{rate:>10,.0f}{us:>10.1f}")
    out.append("   slowdown (time per message, ours / floor):")
    out.append(
        f"     append_message / floor INSERT      {s['ratio_full_over_floor_insert']:>7.1f}x"
    )
    out.append(f"     Database.write / floor INSERT      {s['ratio_sql_over_floor_insert']:>7.1f}x")
    out.append(f"     append_message / floor INSERT+UPD  {s['ratio_full_over_floor_touch']:>7.1f}x")
    out.append(f"     Database.write / floor INSERT+UPD  {s['ratio_sql_over_floor_touch']:>7.1f}x")
    out.append(
        f"   append_message minus Database.write (history.json + thread hop): "
        f"{s['history_extra_us_per_msg']:.0f} µs/msg, "
        f"{100 * s['history_share_of_full']:.0f}% of append_message"
    )

    f = results["fts_search"]
    out.append("")
    out.append(
        f"4. full-text search, limit 20  ({f['messages']:,} messages in {f['sessions']} "
        f"sessions, {f['db_bytes'] / MIB:.0f} MiB; loaded in {f['fill_seconds']:.1f}s; "
        f"{f['queries']} queries)"
    )
    out.append(f"   {'query kind':<20}{'n':>5}{'p50 ms':>10}{'p99 ms':>10}{'avg hits':>10}")
    for kind, k in f["by_kind"].items():
        out.append(
            f"   {kind:<20}{k['queries']:>5}{k['p50_ms']:>10.2f}{k['p99_ms']:>10.2f}"
            f"{k['avg_hits']:>10.1f}"
        )
    out.append(
        f"   {'all (ours)':<20}{f['queries']:>5}{f['ours_p50_ms']:>10.2f}{f['ours_p99_ms']:>10.2f}"
    )
    out.append(
        f"   trigram-only queries (every term >= 3 chars), ours vs bare sqlite3 MATCH, "
        f"n={f['floor_queries']}:"
    )
    out.append(f"   {'':<20}{'p50 ms':>15}{'p99 ms':>10}")
    out.append(
        f"   {'ours':<20}{f['ours_fts_only_p50_ms']:>15.2f}{f['ours_fts_only_p99_ms']:>10.2f}"
    )
    out.append(f"   {'floor':<20}{f['floor_p50_ms']:>15.2f}{f['floor_p99_ms']:>10.2f}")
    out.append(f"   {'ratio ours/floor':<20}{f['ratio_p50']:>15.2f}{f['ratio_p99']:>10.2f}")
    out.append(f"   median per-query ratio: {f['ratio_median_per_query']:.2f}")
    if f["floor_hit_count_mismatches"]:
        out.append(
            f"   WARNING: {f['floor_hit_count_mismatches']} queries returned a different "
            "number of hits than the floor"
        )
    return "\n".join(out)


async def run_async(root: Path, scale: Scale) -> dict[str, Any]:
    results: dict[str, Any] = {}
    log("inserts: ours vs floor")
    results["inserts"] = await bench_inserts(root, scale, TextMaker(SEED + 2))
    log("full-text search")
    results["fts_search"] = await bench_fts(root, scale, TextMaker(SEED + 3))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke check")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args(argv)

    configure_logging("WARNING")
    scale = QUICK if args.quick else FULL
    started = time.perf_counter()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agenvoy-bench-") as tmp:
        root = Path(tmp)
        log("history.json append")
        results["history_append"] = bench_history(root, scale, TextMaker(SEED + 1))
        results.update(asyncio.run(run_async(root, scale)))
    results["meta"] = {
        "mode": "quick" if args.quick else "full",
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "seconds": time.perf_counter() - started,
        "scale": asdict(scale),
    }
    print(render(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
