"""Load on `POST /v1/send` with the offline agent, against a floor measured in the same run.

    .venv/bin/python bench/http_load.py [--messages N] [--sessions M] [--quick]

M client workers each own one session and send their share of N messages one after another
(a session runs one task at a time, so this is the most a single chat can ask for), all
workers at once. The floor is a bare aiohttp handler on the same machine that does, per
message, the same committed SQLite transactions as the gateway's path does (session + user
message, usage, run + reply; HTTP callers read replies from the gateway, so there is no
outbox entry to record or mark) with the same pragmas, and
answers with the same JSON shape. The ratio ours/floor is the number to watch: absolute
numbers swing with whatever else the shared machine is doing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from adapters.http import start_http
from gateway.logs import configure_logging
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.db import Database, sqlite_pragmas

WRITES_PER_MESSAGE = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def drive(url: str, sessions: list[str], per_session: int) -> tuple[float, list[float]]:
    latencies: list[float] = []

    async def worker(http: aiohttp.ClientSession, sid: str) -> None:
        for i in range(per_session):
            started = time.perf_counter()
            async with http.post(
                f"{url}/v1/send", json={"content": f"load {sid} {i}", "session_id": sid}
            ) as resp:
                body = await resp.json()
                if resp.status != 200 or not str(body.get("text", "")).startswith("echo: "):
                    raise RuntimeError(f"unexpected answer {resp.status}: {body}")
            latencies.append(time.perf_counter() - started)

    connector = aiohttp.TCPConnector(limit=len(sessions) + 4)
    async with aiohttp.ClientSession(connector=connector) as http:
        started = time.perf_counter()
        await asyncio.gather(*(worker(http, sid) for sid in sessions))
        return time.perf_counter() - started, latencies


async def run_ours(root: Path, sessions: int, per_session: int) -> tuple[float, list[float]]:
    settings = Settings(home=root / "ours", http_port=free_port(), _env_file=None)  # type: ignore[call-arg]
    runtime = await Runtime.start(settings)
    runner = await start_http(runtime)
    url = f"http://127.0.0.1:{settings.http_port}"
    try:
        ids: list[str] = []
        async with aiohttp.ClientSession() as http:
            for _ in range(sessions):
                async with http.post(f"{url}/v1/session", json={"prefix": "cli"}) as resp:
                    ids.append((await resp.json())["session_id"])
        return await drive(url, ids, per_session)
    finally:
        await runner.cleanup()
        await runtime.close()


def floor_writes(path: Path, sid: str, text: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for pragma in sqlite_pragmas():
            conn.execute(pragma)
        now = int(time.time() * 1000)
        user_message = (
            "INSERT INTO messages (session_id, role, content, sender, send_at) "
            "VALUES (?, 'user', ?, '', ?)"
        )
        reply = (
            "INSERT INTO messages (session_id, role, content, sender, send_at) "
            "VALUES (?, 'assistant', ?, '', ?)"
        )
        # One list per committed transaction, as the gateway groups them.
        transactions: list[list[tuple[str, tuple[Any, ...]]]] = [
            [
                ("INSERT INTO session (id) VALUES (?) ON CONFLICT DO NOTHING", (sid,)),
                (user_message, (sid, text, now)),
            ],
            [("INSERT INTO usage (session_id, model, send_at) VALUES (?, 'floor', ?)", (sid, now))],
            [(reply, (sid, f"echo: {text}", now))],
        ]
        assert len(transactions) == WRITES_PER_MESSAGE
        for statements in transactions:
            conn.execute("BEGIN IMMEDIATE")
            for sql, params in statements:
                conn.execute(sql, params)
            conn.execute("COMMIT")
    finally:
        conn.close()


async def run_floor(root: Path, sessions: int, per_session: int) -> tuple[float, list[float]]:
    path = root / "floor" / "history.db"
    db = await Database.open(f"sqlite:///{path}")  # the same schema and triggers
    await db.close()
    lock = asyncio.Lock()  # one writer at a time, as SQLite allows

    async def send(request: web.Request) -> web.Response:
        body = await request.json()
        sid, text = body["session_id"], body["content"]
        async with lock:
            await asyncio.to_thread(floor_writes, path, sid, text)
        return web.json_response({"session_id": sid, "status": "done", "text": f"echo: {text}"})

    app = web.Application()
    app.router.add_post("/v1/send", send)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        ids = [f"cli-floor{i}" for i in range(sessions)]
        return await drive(f"http://127.0.0.1:{port}", ids, per_session)
    finally:
        await runner.cleanup()


def report(name: str, elapsed: float, latencies: list[float]) -> dict[str, float]:
    row = {
        "messages": len(latencies),
        "seconds": elapsed,
        "per_second": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "mean_ms": statistics.fmean(latencies) * 1000,
    }
    print(f"   {name:<34}{row['per_second']:>9.0f}{row['p50_ms']:>10.1f}{row['p99_ms']:>10.1f}")
    return row


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="small run for a smoke check")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    messages, sessions = (200, 10) if args.quick else (args.messages, args.sessions)
    per_session = max(1, messages // sessions)
    configure_logging("WARNING")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"POST /v1/send load: {per_session * sessions} messages over {sessions} sessions")
        print(f"   {'':<34}{'msg/s':>9}{'p50 ms':>10}{'p99 ms':>10}")
        ours = report("ours (offline agent)", *await run_ours(root, sessions, per_session))
        floor = report(
            f"floor (aiohttp + {WRITES_PER_MESSAGE} SQLite commits)",
            *await run_floor(root, sessions, per_session),
        )
    ratios = {
        "throughput ours/floor": ours["per_second"] / floor["per_second"],
        "p50 ours/floor": ours["p50_ms"] / floor["p50_ms"],
        "p99 ours/floor": ours["p99_ms"] / floor["p99_ms"],
    }
    for name, value in ratios.items():
        print(f"   {name:<34}{value:>9.2f}")
    if args.json:
        args.json.write_text(json.dumps({"ours": ours, "floor": floor, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
