"""Group chatter: messages kept as context without a task (`Router.record`, what a busy Discord
or Telegram group mostly sends), against a floor measured in the same run.

    .venv/bin/python bench/chatter.py [--chats N] [--messages M] [--quick] [--json FILE]

N chats at once (50 by default) each record their share of M messages one after another, as a
platform delivers a chat's messages in order. Ours is the gateway's router (in this process,
on SQLite): the archive row (session created if need be, `source_key` for de-duplication), its
history.json line and its action.log line. The floor inserts the same rows with bare sqlite3
on one long-lived connection (the gateway's schema and pragmas) on a thread of its own, one
transaction per message, the chats' calls queued for it. Goal: ours at least 0.5 times the
floor's throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gateway.events import Inbound, Origin
from gateway.logs import configure_logging
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.db import Database
from gateway.store.sqlite_setup import sqlite_pragmas

GOAL = 0.5
INSERT = (
    "INSERT INTO messages (session_id, role, content, sender, send_at, source_key) "
    "VALUES (?, 'user', ?, ?, ?, ?)"
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def load(chats: int, per_chat: int, record: object) -> tuple[float, list[float]]:
    latencies: list[float] = []

    async def chat(index: int) -> None:
        for k in range(per_chat):
            started = time.perf_counter()
            await record(f"tg--100{index}", f"chatter {index} {k} about the weather", index, k)  # type: ignore[operator]
            latencies.append(time.perf_counter() - started)

    began = time.perf_counter()
    await asyncio.gather(*(chat(i) for i in range(chats)))
    return time.perf_counter() - began, latencies


async def ours(root: Path, chats: int, per_chat: int) -> tuple[float, list[float]]:
    runtime = await Runtime.start(Settings(home=root / "ours", _env_file=None))

    async def record(sid: str, text: str, index: int, k: int) -> None:
        origin = Origin("telegram", sender_id=str(index), sender_name=f"user{index}")
        await runtime.router.record(
            Inbound(origin, sid, text, source_key=f"telegram:bench:{index}:{k}")
        )

    try:
        return await load(chats, per_chat, record)
    finally:
        await runtime.close()


async def floor(root: Path, chats: int, per_chat: int) -> tuple[float, list[float]]:
    path = root / "floor" / "history.db"
    db = await Database.open(f"sqlite:///{path}")  # the same schema, indexes and triggers
    await db.close()
    worker = ThreadPoolExecutor(max_workers=1)

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in sqlite_pragmas():
            conn.execute(pragma)
        return conn

    loop = asyncio.get_running_loop()
    conn = await loop.run_in_executor(worker, connect)

    def insert(sid: str, text: str, sender: str, key: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO session (id) VALUES (?) ON CONFLICT DO NOTHING", (sid,))
        conn.execute(INSERT, (sid, text, sender, int(time.time() * 1000), key))
        conn.execute("COMMIT")

    async def record(sid: str, text: str, index: int, k: int) -> None:
        key = f"telegram:bench:{index}:{k}"
        await loop.run_in_executor(worker, insert, sid, text, f"user{index}", key)

    try:
        return await load(chats, per_chat, record)
    finally:
        await loop.run_in_executor(worker, conn.close)
        worker.shutdown()


def row(elapsed: float, latencies: list[float]) -> dict[str, float]:
    return {
        "per_second": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--quick", action="store_true", help="a small run, for a smoke check")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    messages = 500 if args.quick else args.messages
    per_chat = max(1, messages // args.chats)
    configure_logging("WARNING")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        results = {
            "floor": row(*await floor(root, args.chats, per_chat)),
            "ours": row(*await ours(root, args.chats, per_chat)),
        }
    ratio = results["ours"]["per_second"] / results["floor"]["per_second"]
    print(f"Router.record: {per_chat * args.chats} messages from {args.chats} chats at once")
    print(f"   {'':<36}{'msg/s':>9}{'p50 ms':>10}{'p99 ms':>10}")
    for name, label in (("ours", "ours (archive + history + action.log)"), ("floor", "floor")):
        r = results[name]
        print(f"   {label:<36}{r['per_second']:>9.0f}{r['p50_ms']:>10.2f}{r['p99_ms']:>10.2f}")
    mark = "" if ratio >= GOAL else f"  (goal {GOAL})"
    print(f"   {'throughput ours/floor':<36}{ratio:>9.2f}{mark}")
    if args.json:
        args.json.write_text(json.dumps({**results, "ratio": ratio}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
