"""Load on `POST /v1/send` with the offline agent, against a floor measured in the same run.

    .venv/bin/python bench/http_load.py [--messages N] [--sessions M] [--quick]
        [--database sqlite|postgresql|both] [--json FILE]

M client workers each own one session and send their share of N messages one after another
(a session runs one task at a time, so this is the most a single chat can ask for), all
workers at once. Both servers run at the same time in processes of their own and take turns
(ROUNDS each, alternating which goes first), so a noisy neighbour weighs on both alike; this
process only drives them, its garbage collector held while a turn is timed. Ours
is `agenvoy run`; the floor (`floor_server.py`) is a bare aiohttp handler with one long-lived
SQLite connection that does, per message, the same committed transactions as the gateway's
path (session + user message; usage, run + reply; HTTP callers read replies from the gateway,
so there is no outbox entry to record or mark) with the same pragmas, appends the same two
history lines, and answers with the same JSON shape. The ratio ours/floor is the number to
watch: absolute numbers swing with whatever else the shared machine is doing. Each server first
answers one message per session that is not counted (the steady state is measured; a cold
start is `store_scale.py`'s).

`--database postgresql` runs the same load on PostgreSQL (AGENVOY_BENCH_PG_DSN, default
postgresql://postgres@127.0.0.1:5432/test; the role must be allowed to create databases).
Each server gets a database of its own, created for the run and dropped afterwards: ours is
`agenvoy run` with AGENVOY_DATABASE_URL pointing at it and nothing else changed (one instance
needs no Redis: its KV store stays the embedded SQLite file and its signals stay in-process,
unless AGENVOY_KV_URL is set in the environment, which is passed on); the floor
(`floor_server_pg.py`) is the same handler with one asyncpg pool, on a database given the
gateway's schema by the gateway's migrations. `--database both` runs SQLite, then PostgreSQL.

`--threads` adds where each server's CPU went, per message, thread by thread (on Linux: the
gateway names its threads for the operating system, gateway/threads.py): the event loop, the
SQLite writer, the lean reads' thread and so on. Python runs one thread at a time, so the sum,
not the busiest thread, is what bounds a process's messages per second.

`--json FILE` writes `{"database", "ours", "floor", "ratios"}` (PostgreSQL adds `server`; with
`--threads`, each side has `threads_ms_per_message`); with `both`, one such object under each
database's name.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import re
import secrets
import shutil
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from asyncio.subprocess import Process
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg  # type: ignore[import-untyped]

from gateway.logs import configure_logging
from gateway.settings import mask_url
from gateway.store.db import Database

EXE = shutil.which("agenvoy") or str(Path(sys.executable).with_name("agenvoy"))
PG_DSN = os.environ.get("AGENVOY_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")

WRITES_PER_MESSAGE = 2
ROUNDS = 4  # turns each side takes; the shares add up to the messages asked for
# The PostgreSQL floor gets a connection for every session in flight, so that no message waits
# for one, up to half of PostgreSQL's default max_connections (the server is shared).
PG_FLOOR_POOL_MAX = 50


HEADER = f"   {'':<34}{'msg/s':>9}{'p50 ms':>10}{'p99 ms':>10}{'CPU ms/msg':>11}"


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
            if proc.returncode is not None:
                break
            await asyncio.sleep(0.1)
    if proc.returncode is None:
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


@dataclass(frozen=True)
class Target:
    url: str
    sessions: list[str]  # to drive on it
    pid: int  # whose CPU time is counted


@contextlib.contextmanager
def collector_held() -> Iterator[None]:
    """This process's garbage collector held for a timed turn (what it made before is
    collected first, untimed). The driver times every message from here: one of its own
    full collections, 100-200 ms once its fakes and latency lists have grown, was a pause in
    whichever server's turn it fell, and the p99 of a 400-message run is its 4 slowest."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU time `pid` has used so far (Linux's /proc), None where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Not threads: the system CPU and the context switches of all of them, in the same table.
SYSTEM, SWITCHES = "(system CPU)", "(context switches)"
SWITCH_FIELDS = ("ctxt_switches",)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds the threads of `pid` have used so far, added up by the name the operating
    system knows each by: the process's first thread is "event loop", numbered ones of a kind
    go together ("db-read_*"), and unnamed ones (executors, libraries') under "other"."""
    process = Path(f"/proc/{pid}/comm")
    totals: dict[str, float] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        unnamed = process.read_text().strip()
    except OSError:
        return totals
    for task in tasks:
        try:
            comm = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # ended meanwhile
        if task.name == str(pid):
            name = "event loop"
        elif comm == unnamed:
            name = "other"
        else:
            name = re.sub(r"_\d+$", "_*", comm)
        used = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        totals[name] = totals.get(name, 0.0) + used
        totals[SYSTEM] = totals.get(SYSTEM, 0.0) + int(fields[12]) / os.sysconf("SC_CLK_TCK")
        totals[SWITCHES] = totals.get(SWITCHES, 0.0) + _switches(task)
    return totals


def _switches(task: Path) -> int:
    """How often the thread gave up the CPU: to wait (a hand-off, a lock, I/O) or preempted."""
    try:
        status = (task / "status").read_text()
    except OSError:
        return 0
    fields = (line.split(":") for line in status.splitlines())
    return sum(int(value) for key, value in fields if key.endswith(SWITCH_FIELDS))


@contextlib.asynccontextmanager
async def ours_server(
    root: Path, sessions: int, database_url: str | None = None
) -> AsyncIterator[Target]:
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
    if database_url is not None:
        env["AGENVOY_DATABASE_URL"] = database_url
    proc = await serving([EXE, "run"], url, env, home)
    try:
        ids: list[str] = []
        async with aiohttp.ClientSession() as http:
            for _ in range(sessions):
                async with http.post(f"{url}/v1/session", json={"prefix": "cli"}) as resp:
                    ids.append((await resp.json())["session_id"])
        yield Target(url, ids, proc.pid)
    finally:
        await stopped(proc)


@contextlib.asynccontextmanager
async def floor_server(root: Path, sessions: int) -> AsyncIterator[Target]:
    path = root / "floor" / "history.db"
    db = await Database.open(f"sqlite:///{path}")  # the same schema and triggers
    await db.close()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Path(__file__).with_name("floor_server.py")
    argv = [sys.executable, str(server), str(path), str(root / "floor" / "sessions"), str(port)]
    proc = await serving(argv, url, dict(os.environ), root)
    try:
        yield Target(url, [f"cli-floor{i}" for i in range(sessions)], proc.pid)
    finally:
        await stopped(proc)


@contextlib.asynccontextmanager
async def floor_server_pg(root: Path, sessions: int, dsn: str) -> AsyncIterator[Target]:
    db = await Database.open(dsn)  # the same schema and indexes, trigram index included
    await db.close()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Path(__file__).with_name("floor_server_pg.py")
    history = root / "floor" / "sessions"
    argv = [sys.executable, str(server), dsn, str(history), str(port), str(floor_pool(sessions))]
    proc = await serving(argv, url, dict(os.environ), root)
    try:
        yield Target(url, [f"cli-floor{i}" for i in range(sessions)], proc.pid)
    finally:
        await stopped(proc)


@dataclass
class Run:
    """One side's turns added up."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    cpu_seconds: float | None = 0.0  # the server process's, None where it cannot be read
    threads: dict[str, float] = field(default_factory=dict)  # its CPU seconds by thread


async def alternate(ours: Target, floor: Target, per_session: int, rounds: int) -> tuple[Run, Run]:
    """Drive both servers in turns (which one goes first alternates), so that whatever else
    the machine does meanwhile weighs on both alike; returns each side's time, latencies and
    the CPU its server process used during its turns."""
    totals = {"ours": Run(), "floor": Run()}
    # One message per session first, not counted, on both: the steady state is measured, not
    # the first use of each session (its first history check, and on PostgreSQL a connection
    # opened and the statements prepared on it, which the floor's pool did at its start).
    for target in (ours, floor):
        await drive(target.url, target.sessions, 1)
    shares = [per_session // rounds + (1 if r < per_session % rounds else 0) for r in range(rounds)]
    for number, share in enumerate(shares):
        turn = [("ours", ours), ("floor", floor)]
        for name, target in turn if number % 2 == 0 else reversed(turn):
            cpu_before, threads_before = cpu_seconds(target.pid), thread_cpu(target.pid)
            with collector_held():
                elapsed, latencies = await drive(target.url, target.sessions, share)
            cpu_after, threads_after = cpu_seconds(target.pid), thread_cpu(target.pid)
            run = totals[name]
            for thread, used in threads_after.items():
                spent = used - threads_before.get(thread, 0.0)
                run.threads[thread] = run.threads.get(thread, 0.0) + spent
            run.seconds += elapsed
            run.latencies += latencies
            if run.cpu_seconds is not None and cpu_before is not None and cpu_after is not None:
                run.cpu_seconds += cpu_after - cpu_before
            else:
                run.cpu_seconds = None
    return totals["ours"], totals["floor"]


def floor_pool(sessions: int) -> int:
    return min(sessions, PG_FLOOR_POOL_MAX)


@contextlib.asynccontextmanager
async def fresh_pg_database(tag: str) -> AsyncIterator[str]:
    """A database of its own for one server, dropped afterwards; yields its address."""
    name = f"agenvoy_bench_http_{tag}_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(PG_DSN, timeout=10)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield urlunsplit(urlsplit(PG_DSN)._replace(path=f"/{name}"))
    finally:
        admin = await asyncpg.connect(PG_DSN, timeout=10)
        try:
            # FORCE: a server killed after its time-out may have left connections behind.
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


async def pg_server() -> dict[str, str]:
    """What the PostgreSQL numbers depend on, for the header and the JSON."""
    try:
        conn = await asyncpg.connect(PG_DSN, timeout=10)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        # Before any server starts: a missing PostgreSQL is one line, not a traceback.
        sys.exit(f"PostgreSQL not reachable at {mask_url(PG_DSN)} (AGENVOY_BENCH_PG_DSN): {exc}")
    try:
        version = await conn.fetchval("SHOW server_version")
        sync = await conn.fetchval("SHOW synchronous_commit")
    finally:
        await conn.close()
    kv = os.environ.get("AGENVOY_KV_URL", "")
    return {
        "version": str(version).split()[0],
        "address": urlunsplit(urlsplit(mask_url(PG_DSN))._replace(path="")),
        "synchronous_commit": str(sync),
        "ours_kv": mask_url(kv) if kv else "embedded SQLite",
    }


def report(name: str, run: Run) -> dict[str, float]:
    latencies = run.latencies
    row = {
        "messages": len(latencies),
        "seconds": run.seconds,
        "per_second": len(latencies) / run.seconds,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "mean_ms": statistics.fmean(latencies) * 1000,
    }
    cpu = "       n/a"
    if run.cpu_seconds is not None:
        row["cpu_ms_per_message"] = run.cpu_seconds * 1000 / len(latencies)
        cpu = f"{row['cpu_ms_per_message']:>10.2f}"
    print(
        f"   {name:<34}{row['per_second']:>9.0f}{row['p50_ms']:>10.1f}{row['p99_ms']:>10.1f}{cpu}"
    )
    return row


def thread_shares(threads: dict[str, float], messages: int) -> dict[str, Any]:
    """`thread_cpu`'s differences over a run, per message: each thread's CPU in ms (busiest
    first), the system CPU of all of them, and their context switches."""
    return {
        "threads_ms_per_message": {
            thread: used * 1000 / messages
            for thread, used in sorted(threads.items(), key=lambda item: -item[1])
            if used > 0 and thread not in (SYSTEM, SWITCHES)
        },
        "system_ms_per_message": threads.get(SYSTEM, 0.0) * 1000 / messages,
        "switches_per_message": threads.get(SWITCHES, 0.0) / messages,
    }


def print_shares(name: str, shares: dict[str, Any]) -> None:
    """`thread_shares` as two lines; the process's ticks are 10 ms, so a thread below a few
    ticks over the whole run is noise."""
    shown = ", ".join(f"{t} {ms:.2f}" for t, ms in shares["threads_ms_per_message"].items())
    print(f"   {name} CPU ms per message by thread: {shown}")
    print(
        f"   {name}: of that, system {shares['system_ms_per_message']:.2f} ms;"
        f" context switches per message {shares['switches_per_message']:.1f}"
    )


def print_threads(name: str, run: Run, row: dict[str, Any]) -> None:
    row.update(thread_shares(run.threads, len(run.latencies)))
    print_shares(name, row)


def print_ratios(ours: dict[str, float], floor: dict[str, float]) -> dict[str, float]:
    ratios = {
        "throughput ours/floor": ours["per_second"] / floor["per_second"],
        "p50 ours/floor": ours["p50_ms"] / floor["p50_ms"],
        "p99 ours/floor": ours["p99_ms"] / floor["p99_ms"],
    }
    if "cpu_ms_per_message" in ours and "cpu_ms_per_message" in floor:
        ratios["CPU per message ours/floor"] = (
            ours["cpu_ms_per_message"] / floor["cpu_ms_per_message"]
        )
    for name, value in ratios.items():
        print(f"   {name:<34}{value:>9.2f}")
    return ratios


async def load_sqlite(
    root: Path, sessions: int, per_session: int, header: bool, threads: bool
) -> dict[str, Any]:
    if header:
        print(f"== SQLite {sqlite3.sqlite_version} (a fresh file per server) ==")
    print(f"POST /v1/send load: {per_session * sessions} messages over {sessions} sessions")
    print(HEADER)
    async with (
        ours_server(root, sessions) as ours_at,
        floor_server(root, sessions) as floor_at,
    ):
        ours_run, floor_run = await alternate(ours_at, floor_at, per_session, ROUNDS)
    ours = report("ours (offline agent)", ours_run)
    floor = report(f"floor ({WRITES_PER_MESSAGE} commits, 1 connection)", floor_run)
    ratios = print_ratios(ours, floor)
    if threads:
        print_threads("ours", ours_run, ours)
        print_threads("floor", floor_run, floor)
    return {"database": "sqlite", "ours": ours, "floor": floor, "ratios": ratios}


async def load_postgresql(
    root: Path, sessions: int, per_session: int, threads: bool
) -> dict[str, Any]:
    server = await pg_server()
    print(
        f"== PostgreSQL {server['version']} at {server['address']} (a fresh database per "
        f"server, synchronous_commit={server['synchronous_commit']}; "
        f"ours' KV store: {server['ours_kv']}) =="
    )
    print(f"POST /v1/send load: {per_session * sessions} messages over {sessions} sessions")
    print(HEADER)
    async with (
        fresh_pg_database("ours") as ours_url,
        fresh_pg_database("floor") as floor_url,
        ours_server(root, sessions, ours_url) as ours_at,
        floor_server_pg(root, sessions, floor_url) as floor_at,
    ):
        ours_run, floor_run = await alternate(ours_at, floor_at, per_session, ROUNDS)
    ours = report("ours (offline agent)", ours_run)
    floor = report(
        f"floor ({WRITES_PER_MESSAGE} commits, pool of {floor_pool(sessions)})", floor_run
    )
    ratios = print_ratios(ours, floor)
    if threads:
        print_threads("ours", ours_run, ours)
        print_threads("floor", floor_run, floor)
    return {
        "database": "postgresql",
        "server": server,
        "floor_pool": floor_pool(sessions),
        "ours": ours,
        "floor": floor,
        "ratios": ratios,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="small run for a smoke check")
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgresql", "both"),
        default="sqlite",
        help="the archive both servers write to (default: sqlite)",
    )
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument(
        "--threads", action="store_true", help="also each server's CPU per message by thread"
    )
    args = parser.parse_args()
    messages, sessions = (200, 10) if args.quick else (args.messages, args.sessions)
    per_session = max(1, messages // sessions)
    configure_logging("WARNING")
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.database in ("sqlite", "both"):
            (root / "sqlite").mkdir()
            runs["sqlite"] = await load_sqlite(
                root / "sqlite",
                sessions,
                per_session,
                header=args.database == "both",
                threads=args.threads,
            )
        if args.database in ("postgresql", "both"):
            (root / "postgresql").mkdir()
            if runs:
                print()
            runs["postgresql"] = await load_postgresql(
                root / "postgresql", sessions, per_session, args.threads
            )
    if args.json:
        numbers = runs if len(runs) > 1 else next(iter(runs.values()))
        args.json.write_text(json.dumps(numbers, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
