"""Load on `POST /v1/send` with the offline agent, against a floor measured in the same run.

    .venv/bin/python bench/http_load.py [--messages N] [--sessions M] [--quick]

M client workers each own one session and send their share of N messages one after another
(a session runs one task at a time, so this is the most a single chat can ask for), all
workers at once. Both servers run in processes of their own, this one only drives them: ours
is `agenvoy run`; the floor (`floor_server.py`) is a bare aiohttp handler with one long-lived
SQLite connection that does, per message, the same committed transactions as the gateway's
path (session + user message, usage, run + reply; HTTP callers read replies from the gateway,
so there is no outbox entry to record or mark) with the same pragmas, appends the same two
history lines, and answers with the same JSON shape. The ratio ours/floor is the number to
watch: absolute numbers swing with whatever else the shared machine is doing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from asyncio.subprocess import Process
from pathlib import Path

import aiohttp

from gateway.logs import configure_logging
from gateway.store.db import Database

EXE = shutil.which("agenvoy") or str(Path(sys.executable).with_name("agenvoy"))

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


async def serving(argv: list[str], url: str, env: dict[str, str], cwd: Path) -> Process:
    """Start a server process and wait until it answers /healthz."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    async with aiohttp.ClientSession() as http:
        for _ in range(300):
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url + "/healthz") as resp:
                    if resp.status == 200:
                        return proc
            await asyncio.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{argv[0]} did not come up")


async def stopped(proc: Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def run_ours(root: Path, sessions: int, per_session: int) -> tuple[float, list[float]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    home = root / "ours"
    home.mkdir()
    env = {
        **os.environ,
        "AGENVOY_HOME": str(home),
        "AGENVOY_HTTP_PORT": str(port),
        "AGENVOY_LOG_LEVEL": "WARNING",
    }
    proc = await serving([EXE, "run"], url, env, home)
    try:
        ids: list[str] = []
        async with aiohttp.ClientSession() as http:
            for _ in range(sessions):
                async with http.post(f"{url}/v1/session", json={"prefix": "cli"}) as resp:
                    ids.append((await resp.json())["session_id"])
        return await drive(url, ids, per_session)
    finally:
        await stopped(proc)


async def run_floor(root: Path, sessions: int, per_session: int) -> tuple[float, list[float]]:
    path = root / "floor" / "history.db"
    db = await Database.open(f"sqlite:///{path}")  # the same schema and triggers
    await db.close()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Path(__file__).with_name("floor_server.py")
    argv = [sys.executable, str(server), str(path), str(root / "floor" / "sessions"), str(port)]
    proc = await serving(argv, url, dict(os.environ), root)
    try:
        ids = [f"cli-floor{i}" for i in range(sessions)]
        return await drive(url, ids, per_session)
    finally:
        await stopped(proc)


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
            f"floor ({WRITES_PER_MESSAGE} commits, 1 connection)",
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
