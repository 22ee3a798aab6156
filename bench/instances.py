"""Several gateway instances on one PostgreSQL + Redis: throughput with 1, 2 and 3 instances,
and how long a session waits after its owner is SIGKILLed.

    .venv/bin/python bench/instances.py [--messages N] [--sessions M] [--quick]

Each run starts real `agenvoy run` processes (offline agent) on a fresh PostgreSQL database.
M client workers each own one session and send their share of N messages one after another,
each message to the next instance in turn (so most messages reach an instance that does not
own their session and are handed over), each waiting for its reply (`"wait"`), all workers at
once. The floor is the same load on one instance, measured in the same run: the ratios say
what adding instances buys (on one machine the instances share its cores, so this shows the
cost of the hand-over as much as any gain).

Takeover: a session's owner is SIGKILLed while a task runs; the time from the kill until a
message sent to the surviving instance is answered, next to the lease TTL.

Needs PostgreSQL (AGENVOY_BENCH_PG_DSN, default postgresql://postgres@127.0.0.1:5432/test) and
Redis (AGENVOY_BENCH_REDIS_URL, default redis://127.0.0.1:6379/0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg  # type: ignore[import-untyped]

PG_DSN = os.environ.get("AGENVOY_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AGENVOY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
EXE = shutil.which("agenvoy") or str(Path(sys.executable).with_name("agenvoy"))
TTL = 3.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Instance:
    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            **env,
            "AGENVOY_HOME": str(home),
            "AGENVOY_HTTP_PORT": str(self.port),
            "AGENVOY_LOG_LEVEL": "warning",
        }
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        quiet = asyncio.subprocess.DEVNULL
        self.proc = await asyncio.create_subprocess_exec(
            EXE, "run", env=self.env, stdout=quiet, stderr=quiet
        )
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(self.url + "/healthz") as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError(f"instance on port {self.port} did not come up")

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                await self.kill()


@asynccontextmanager
async def cluster(root: Path, count: int, tag: str) -> AsyncIterator[list[Instance]]:
    name = f"agenvoy_bench_{tag}_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(PG_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    base = PG_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    env = {
        "AGENVOY_DATABASE_URL": f"{base}/{name}",
        "AGENVOY_KV_URL": REDIS_URL,
        "AGENVOY_LEASE_TTL_SECONDS": str(TTL),
    }
    instances = [
        Instance(root / f"{tag}-{n}", {**env, "AGENVOY_INSTANCE_ID": f"{tag}-{n}"})
        for n in range(count)
    ]
    try:
        for instance in instances:  # one at a time: the first one migrates the database
            await instance.start()
        yield instances
    finally:
        await asyncio.gather(*(i.stop() for i in instances))
        admin = await asyncpg.connect(PG_DSN)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def send(http: aiohttp.ClientSession, url: str, sid: str, text: str) -> dict[str, Any]:
    body = {"content": text, "session_id": sid, "wait": 30}
    async with http.post(url + "/v1/send", json=body) as resp:
        data: dict[str, Any] = await resp.json()
    if data.get("status") != "done":
        raise RuntimeError(f"not answered: {data}")
    return data


async def load(instances: list[Instance], messages: int, sessions: int) -> dict[str, float]:
    per_session = max(1, messages // sessions)
    latencies: list[float] = []
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as http:

        async def worker(index: int) -> None:
            sid = f"chat-bench-{index}"
            for k in range(per_session):
                target = instances[(index + k) % len(instances)]
                started = time.perf_counter()
                await send(http, target.url, sid, f"load {index} {k}")
                latencies.append((time.perf_counter() - started) * 1000)

        began = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(sessions)))
        elapsed = time.perf_counter() - began
    return {
        "msg_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies),
        "p99_ms": sorted(latencies)[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


async def takeover(root: Path) -> float:
    """Seconds from SIGKILL of a session's owner until the session's next message is answered
    by the other instance, less the 2 s its interrupted task takes when it runs again."""
    async with cluster(root, 2, "takeover") as (first, second):
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            sid = "chat-takeover"
            body = {"content": "!sleep 2", "session_id": sid, "wait": 0}
            async with http.post(first.url + "/v1/send", json=body) as resp:
                await resp.json()
            answered = asyncio.ensure_future(send(http, second.url, sid, "after the crash"))
            await asyncio.sleep(0.5)  # the slow task runs on the first instance
            killed = time.perf_counter()
            await first.kill()
            await answered
            return time.perf_counter() - killed - 2


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="small run for a smoke check")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.sessions = 60, 6
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for count in (1, 2, 3):
            async with cluster(root, count, f"n{count}") as instances:
                print(f"{count} instance(s): {args.messages} messages…", file=sys.stderr)
                results[f"{count}"] = await load(instances, args.messages, args.sessions)
        results["takeover_s"] = await takeover(root)
    floor = results["1"]["msg_per_s"]
    print(f"{'instances':>10} {'msg/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'vs 1':>6}")
    for key in ("1", "2", "3"):
        row = results[key]
        print(
            f"{key:>10} {row['msg_per_s']:8.1f} {row['p50_ms']:8.1f} {row['p99_ms']:8.1f}"
            f" {row['msg_per_s'] / floor:5.2f}x"
        )
    print(f"takeover after SIGKILL: {results['takeover_s']:.2f} s (lease TTL {TTL:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
