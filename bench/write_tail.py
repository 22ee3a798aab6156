"""Write tail: how long one small SQLite write waits, its slowest ones most of all.

    .venv/bin/python bench/write_tail.py [--writes N] [--quick]

Writes N rows of 3,000 bytes (about a message with its journal) one after another, each
committed on its own:

- ours: `Database.write_lean`, the gateway's group writer (a hand-off to its thread and back);
- floor: a bare sqlite3 connection in this thread, the gateway's pragmas, one commit per row,
  SQLite's own WAL checkpoints (every 1,000 pages, inside the commit that crosses them).

The median says what the hand-off costs; the 99.9th percentile and the count of writes over
3 ms say whether a write ever waits for a WAL checkpoint (copying ~4 MiB of log back into the
database file), which the gateway runs on a thread of its own (gateway/store/checkpoints.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.store.db import Database
from gateway.store.sqlite_setup import sqlite_pragmas

ROW = b"x" * 3000
SLOW_MS = 3.0


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)

    def at(share: float) -> float:
        return ordered[max(0, int(share * len(ordered)) - 1)]

    return {
        "p50": at(0.5),
        "p99": at(0.99),
        "p99.9": at(0.999),
        "max": ordered[-1],
        "slow": float(sum(t > SLOW_MS for t in ordered)),
    }


def timed(write: Callable[[], None], count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        write()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def ours(folder: Path, count: int) -> list[float]:
    db = await Database.open(f"sqlite:///{folder / 'ours.db'}")
    try:
        await db.write(lambda s: s.connection().exec_driver_sql("CREATE TABLE t (b BLOB)"))
        times = []
        for _ in range(count):
            started = time.perf_counter()
            await db.write_lean(lambda sql: sql.run("INSERT INTO t VALUES (?)", ROW))
            times.append((time.perf_counter() - started) * 1000)
        return times
    finally:
        await db.close()


def floor(folder: Path, count: int) -> list[float]:
    conn = sqlite3.connect(folder / "floor.db", isolation_level=None)
    try:
        for pragma in sqlite_pragmas():
            conn.execute(pragma)
        conn.execute("CREATE TABLE t (b BLOB)")

        def write() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?)", (ROW,))
            conn.execute("COMMIT")

        return timed(write, count)
    finally:
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=6000)
    parser.add_argument("--quick", action="store_true", help="1,500 writes, for a smoke check")
    args = parser.parse_args(argv)
    count = 1500 if args.quick else args.writes
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = {"floor (bare sqlite3)": summary(floor(folder, count))}
        rows["ours (group writer)"] = summary(asyncio.run(ours(folder, count)))
    print(f"{count} writes of {len(ROW)} bytes, one commit each; times in ms")
    print(f"{'':24}{'p50':>8}{'p99':>8}{'p99.9':>8}{'max':>8}{f'>{SLOW_MS:g} ms':>8}")
    for name, row in rows.items():
        cells = "".join(f"{row[k]:8.3f}" for k in ("p50", "p99", "p99.9", "max"))
        print(f"{name:24}{cells}{int(row['slow']):8d}")
    ours_row, floor_row = rows["ours (group writer)"], rows["floor (bare sqlite3)"]
    for key in ("p50", "p99.9"):
        print(f"{key} ours/floor {ours_row[key] / floor_row[key]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
