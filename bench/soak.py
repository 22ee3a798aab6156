"""Soak: does a long run cost the same per message at its end as at its start?

    .venv/bin/python bench/soak.py [--messages N] [--sessions M] [--workers W] [--slice S]
                                   [--warmup K] [--quick] [--json FILE]

One `agenvoy run` (offline agent, SQLite, HTTP API on loopback) in a process of its own, with
a fresh AGENVOY_HOME. The load goes in rounds: in each, every one of the M sessions gets one
`POST /v1/send`, from W client workers that each own M/W sessions and send to them in turn,
each reply awaited before the next message (and the gateway runs at most
AGENVOY_MAX_RUNNING_PER_SENDER of them at once: they all come from one HTTP identity). N
messages in all; with the defaults every session gets 50 messages and 50 replies, four times
its history window, so most of the run happens after the rolling summary has started folding.

At every S-message slice boundary the gateway's RSS (VmRSS) and CPU time (utime + stime) are
read from /proc. Reported per slice: msg/s, the gateway's CPU seconds and CPU ms per message,
RSS, latency, and the share of the machine's CPU that other processes took (on a shared
machine that, not our code, is what most often moves msg/s from one slice to the next).

The reference is the first slice, two ways: the soak's own first slice (what the goal names),
and the first slice of a fresh twin gateway started for the purpose, whose rounds alternate
with the soaking gateway's last slice, so that a neighbour's burst hits both alike. Goals:

- throughput of the last slice >= 0.9 x the first (CPU per message is shown beside it);
- RSS growth from message K (default N/5, i.e. 2,000 of 10,000) to the end <= 1 MB per
  10,000 messages; judged only when K covers the finished-task table's fill-up
  (FINISHED_TASKS_KEPT), so not with --quick.

Afterwards the archive is read to check that every session's summary kept up (messages not
yet folded stay within window + batch), and the task route shows whether finished tasks
dropped their events beyond the documented bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from asyncio.subprocess import Process
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from http_load import EXE, free_port, percentile, stopped

from gateway.agents.summary import fold_batch
from gateway.engine.tasks import FINISHED_EVENTS_KEPT, FINISHED_TASKS_KEPT
from gateway.settings import Settings

THROUGHPUT_GOAL = 0.9  # last slice / first slice
RSS_GOAL_MB = 1.0  # growth per 10,000 messages after the warm-up
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
REQUEST_TIMEOUT = 120.0  # one reply; far above any sane latency, so a hang fails loudly
FILLER = "the weather is fine today and the build is green, nothing else to report"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Sample:
    at: float  # perf_counter seconds
    cpu: float  # the gateway's utime + stime, seconds
    rss_kb: int
    client_cpu: float  # this process: it shares the machine with the gateway
    machine_busy: float  # every CPU's non-idle time, seconds


def machine_busy() -> float:
    """Seconds all CPUs spent on anything but idle and iowait, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal; guest time is already in user.
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLOCK_TICKS


class ProcStats:
    """One process's CPU time and resident set from /proc, cheap enough to read inline."""

    def __init__(self, pid: int) -> None:
        self.stat = Path(f"/proc/{pid}/stat")
        self.status = Path(f"/proc/{pid}/status")

    def cpu_seconds(self) -> float:
        # The command name may hold spaces and parentheses; the fields after its last ")"
        # start at field 3 (state), so utime (14) and stime (15) sit at 11 and 12.
        fields = self.stat.read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def rss_kb(self) -> int:
        for line in self.status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError(f"no VmRSS in {self.status}")

    def sample(self) -> Sample:
        return Sample(
            time.perf_counter(),
            self.cpu_seconds(),
            self.rss_kb(),
            time.process_time(),
            machine_busy(),
        )


def make_dir(path: Path) -> None:
    path.mkdir()


def log_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if line]


@dataclass
class Round:
    messages: int
    before: Sample
    after: Sample
    latencies: list[float]


@dataclass
class Gateway:
    """An `agenvoy run` process, the sessions it serves and the client load on them."""

    proc: Process
    url: str
    log_file: Path
    stats: ProcStats
    sessions: list[str] = field(default_factory=list)
    turns: int = 0  # rounds so far: every session has had this many messages
    rounds: list[Round] = field(default_factory=list)
    tasks: list[tuple[str, str]] = field(default_factory=list)  # (session, task hash)

    @classmethod
    async def start(cls, home: Path, sessions: int) -> Gateway:
        """Start a gateway with `home` (made here) as its AGENVOY_HOME and create its sessions."""
        make_dir(home)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "AGENVOY_HOME": str(home),
            "AGENVOY_HTTP_PORT": str(port),
            "AGENVOY_LOG_LEVEL": "WARNING",
            # Whatever the caller's environment says, this measures the offline agent on SQLite.
            "AGENVOY_AGENT": "offline",
            "AGENVOY_DATABASE_URL": "",
            "AGENVOY_KV_URL": "",
        }
        log_file = home.with_suffix(".log")
        with log_file.open("wb") as sink:
            proc = await asyncio.create_subprocess_exec(
                EXE, "run", env=env, cwd=home, stdout=sink, stderr=sink
            )
        gateway = cls(proc, url, log_file, ProcStats(proc.pid))
        try:
            await gateway._ready()
            async with aiohttp.ClientSession() as http:
                for _ in range(sessions):
                    async with http.post(f"{url}/v1/session", json={"prefix": "cli"}) as resp:
                        gateway.sessions.append((await resp.json())["session_id"])
        except BaseException:
            await stopped(proc)
            raise
        return gateway

    async def _ready(self) -> None:
        deadline = time.perf_counter() + 30
        async with aiohttp.ClientSession() as http:
            while time.perf_counter() < deadline and self.proc.returncode is None:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(self.url + "/healthz") as resp:
                        if resp.status == 200:
                            return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.proc.wait(), 0.1)  # at once if it died
        tail = "\n".join(log_lines(self.log_file)[-20:])
        raise RuntimeError(f"agenvoy run did not come up:\n{tail}")

    async def round(self, http: aiohttp.ClientSession, workers: int) -> Round:
        """One message to every session; returns once every reply is in."""
        latencies: list[float] = []
        turn = self.turns

        async def worker(owned: list[str]) -> None:
            for sid in owned:
                content = f"soak {turn} {sid}: {FILLER}"
                started = time.perf_counter()
                async with http.post(
                    f"{self.url}/v1/send",
                    json={"content": content, "session_id": sid, "wait": REQUEST_TIMEOUT / 2},
                ) as resp:
                    body = await resp.json()
                if resp.status != 200 or body.get("text") != f"echo: {content}":
                    raise RuntimeError(f"unexpected answer {resp.status}: {body}")
                latencies.append(time.perf_counter() - started)
                self.tasks.append((sid, body["task_hash"]))

        before = self.stats.sample()
        await asyncio.gather(*(worker(self.sessions[w::workers]) for w in range(workers)))
        done = Round(len(latencies), before, self.stats.sample(), latencies)
        self.turns += 1
        self.rounds.append(done)
        return done

    async def stop(self) -> list[str]:
        await stopped(self.proc)
        return log_lines(self.log_file)


def slice_row(rounds: list[Round], first_message: int) -> dict[str, float]:
    """One slice from its rounds. Wall time and the machine's load count only while this
    gateway's rounds ran; its CPU counts from the first round's start to the last one's end,
    so background work that spills past a round (a summary fold) is not lost."""
    count = sum(r.messages for r in rounds)
    wall = sum(r.after.at - r.before.at for r in rounds)
    cpu = rounds[-1].after.cpu - rounds[0].before.cpu
    own = sum(r.after.cpu - r.before.cpu for r in rounds)
    client = sum(r.after.client_cpu - r.before.client_cpu for r in rounds)
    busy = sum(r.after.machine_busy - r.before.machine_busy for r in rounds)
    others = max(0.0, busy - own - client)
    latencies = [lat for r in rounds for lat in r.latencies]
    return {
        "first": first_message,
        "last": first_message + count - 1,
        "seconds": wall,
        "per_second": count / wall,
        "cpu_seconds": cpu,
        "cpu_ms_per_message": cpu / count * 1000,
        "client_cpu_seconds": client,
        "others_cpu_seconds": others,
        # Of all the machine's CPU time in the slice, the share other processes took.
        "others_share": others / (wall * (os.cpu_count() or 1)),
        "rss_mb": rounds[-1].after.rss_kb / 1024,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


def rss_growth(points: list[tuple[int, int]], warmup: int) -> dict[str, float]:
    """Growth after the warm-up, end minus start and least-squares slope, per 10,000 messages;
    `points` are (messages so far, RSS kB) at slice boundaries."""
    after = [(m, kb / 1024) for m, kb in points if m >= warmup]
    if len(after) < 2:
        return {}
    (start, start_mb), (end, end_mb) = after[0], after[-1]
    slope = statistics.linear_regression(*zip(*after, strict=True)).slope if len(after) > 2 else 0.0
    return {
        "from_message": start,
        "rss_start_mb": start_mb,
        "rss_end_mb": end_mb,
        "rss_max_mb": max(mb for _, mb in after),
        "growth_mb": end_mb - start_mb,
        "growth_mb_per_10k": (end_mb - start_mb) * 10_000 / (end - start),
        "slope_mb_per_10k": slope * 10_000,
    }


async def task_events(url: str, tasks: list[tuple[str, str]]) -> dict[str, Any]:
    """How many events the task route still returns for finished tasks, newest to oldest: the
    documented bound is events for the newest FINISHED_EVENTS_KEPT only."""
    probes = {
        "newest": 1,
        f"{FINISHED_EVENTS_KEPT // 2}th newest": FINISHED_EVENTS_KEPT // 2,
        f"{FINISHED_EVENTS_KEPT * 2}th newest": FINISHED_EVENTS_KEPT * 2,
        "oldest": len(tasks),
    }
    found: dict[str, Any] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        for name, back in probes.items():
            if back > len(tasks):
                continue
            sid, task = tasks[-back]
            async with http.get(f"{url}/v1/session/{sid}/task/{task}") as resp:
                body = await resp.json()
            found[name] = {"back": back, "status": resp.status, "events": len(body["events"])}
    return found


def summary_backlog(db_path: Path) -> dict[str, int]:
    """Per session, the messages the summary has not folded yet (everything when it has none)."""
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        rows = db.execute(
            "SELECT m.session_id, COUNT(*) FROM messages m "
            "LEFT JOIN session_summary s ON s.session_id = m.session_id "
            "WHERE m.id > COALESCE(s.cursor, 0) GROUP BY m.session_id"
        ).fetchall()
        summed = db.execute("SELECT COUNT(*) FROM session_summary WHERE cursor > 0").fetchone()[0]
    backlog = [count for _, count in rows]
    return {
        "sessions_with_summary": int(summed),
        "unfolded_max": max(backlog, default=0),
        "unfolded_median": int(statistics.median(backlog)) if backlog else 0,
    }


async def soak(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    rounds_per_slice = args.slice // args.sessions
    slices = args.messages // args.slice
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    connector = aiohttp.TCPConnector(limit=2 * args.workers + 4)
    rows: list[dict[str, float]] = []
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            aiohttp.ClientSession(connector=connector, timeout=timeout)
        )
        ours = await Gateway.start(root / "soak", args.sessions)
        stop_ours = stack.push_async_callback(ours.stop)
        log(f"gateway pid {ours.proc.pid}; {args.messages} messages in {slices} slices")
        points = [(0, ours.stats.rss_kb())]
        for index in range(slices - 1):
            done = [await ours.round(http, args.workers) for _ in range(rounds_per_slice)]
            rows.append(slice_row(done, index * args.slice + 1))
            points.append(((index + 1) * args.slice, done[-1].after.rss_kb))
            log(
                f"  {points[-1][0]:>6} messages: {rows[-1]['per_second']:.1f} msg/s, "
                f"{rows[-1]['cpu_ms_per_message']:.2f} CPU ms/msg, RSS {rows[-1]['rss_mb']:.1f} MB"
            )
        # The reference: a fresh gateway's first slice, its rounds alternating with the last
        # slice's (in turn going first), so that both meet the same neighbours.
        twin = await Gateway.start(root / "twin", args.sessions)
        stop_twin = stack.push_async_callback(twin.stop)
        log(f"fresh twin pid {twin.proc.pid}: its first slice alternates with the last")
        for turn in range(rounds_per_slice):
            for gateway in (ours, twin) if turn % 2 == 0 else (twin, ours):
                await gateway.round(http, args.workers)
        last = ours.rounds[-rounds_per_slice:]
        rows.append(slice_row(last, (slices - 1) * args.slice + 1))
        points.append((slices * args.slice, last[-1].after.rss_kb))
        twin_row = slice_row(twin.rounds, 1)
        events = await task_events(ours.url, ours.tasks)
        twin_log = await stop_twin()
        gateway_log = await stop_ours()
    return {
        "slices": rows,
        "twin_first_slice": twin_row,
        "rss": rss_growth(points, args.warmup),
        "rss_points": [{"messages": m, "rss_kb": kb} for m, kb in points],
        "rounds": [
            {"messages": r.messages, "before": asdict(r.before), "after": asdict(r.after)}
            for r in ours.rounds
        ],
        "summary": summary_backlog(root / "soak" / ".store" / "history.db"),
        "finished_task_events": events,
        "gateway_log_lines": len(gateway_log) + len(twin_log),
        "gateway_log_tail": (gateway_log + twin_log)[-5:],
    }


def verdict(met: bool | None) -> str:
    return "n/a" if met is None else ("met" if met else "MISSED")


def print_row(name: str, row: dict[str, float]) -> None:
    print(
        f"   {name:<14}{row['per_second']:>8.1f}{row['cpu_seconds']:>8.2f}"
        f"{row['cpu_ms_per_message']:>12.2f}{row['rss_mb']:>9.1f}"
        f"{row['p50_ms']:>9.1f}{row['p99_ms']:>9.1f}{row['others_share'] * 100:>10.0f}"
    )


def report(args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any]:
    rows, twin, rss = result["slices"], result["twin_first_slice"], result["rss"]
    print(
        f"   {'messages':<14}{'msg/s':>8}{'CPU s':>8}{'CPU ms/msg':>12}{'RSS MB':>9}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'others %':>10}"
    )
    for row in rows:
        print_row(f"{row['first']}-{row['last']}", row)
    print_row(f"fresh {twin['first']}-{twin['last']}", twin)
    first, last = rows[0], rows[-1]
    ratios = {
        "first": (last["per_second"] / first["per_second"], first),
        "twin": (last["per_second"] / twin["per_second"], twin),
    }
    goals: dict[str, Any] = {"throughput_goal": THROUGHPUT_GOAL, "rss_goal_mb_per_10k": RSS_GOAL_MB}
    for key, label in (("first", "its first slice"), ("twin", "a fresh twin's, interleaved")):
        throughput, reference = ratios[key]
        cpu = last["cpu_ms_per_message"] / reference["cpu_ms_per_message"]
        goals[f"throughput_last_over_{key}"] = throughput
        goals[f"throughput_vs_{key}_met"] = throughput >= THROUGHPUT_GOAL
        goals[f"cpu_per_message_last_over_{key}"] = cpu
        print(
            f"   last slice / {label}: throughput {throughput:.2f} "
            f"(goal >= {THROUGHPUT_GOAL}: {verdict(throughput >= THROUGHPUT_GOAL)}), "
            f"CPU per message {cpu:.2f}"
        )
    # Until the warm-up covers the finished-task table's fill-up, RSS grows by design.
    judged = args.warmup >= FINISHED_TASKS_KEPT and bool(rss)
    goals["rss_growth_mb_per_10k"] = rss.get("growth_mb_per_10k")
    goals["rss_met"] = (rss["growth_mb_per_10k"] <= RSS_GOAL_MB) if judged else None
    if rss:
        note = "" if judged else f"; not judged: warm-up below {FINISHED_TASKS_KEPT} messages"
        print(
            f"   RSS from message {rss['from_message']}: {rss['rss_start_mb']:.1f} -> "
            f"{rss['rss_end_mb']:.1f} MB, {rss['growth_mb_per_10k']:+.2f} MB per 10,000 "
            f"messages (slope {rss['slope_mb_per_10k']:+.2f}; "
            f"goal <= {RSS_GOAL_MB:g}: {verdict(goals['rss_met'])}{note})"
        )
    summary = result["summary"]
    print(
        f"   summaries: {summary['sessions_with_summary']}/{args.sessions} sessions folded; "
        f"unfolded messages per session max {summary['unfolded_max']}, "
        f"median {summary['unfolded_median']} (window + batch = {args.window + args.batch})"
    )
    events = ", ".join(f"{k} {v['events']}" for k, v in result["finished_task_events"].items())
    print(f"   events kept by finished tasks: {events} (bound: newest {FINISHED_EVENTS_KEPT})")
    if result["gateway_log_lines"]:
        print(f"   the gateways logged {result['gateway_log_lines']} warning lines; last:")
        for line in result["gateway_log_tail"]:
            print(f"     {line[:200]}")
    return goals


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--workers", type=int, default=20, help="sessions driven at once")
    parser.add_argument("--slice", type=int, default=1000, help="messages per reported slice")
    parser.add_argument("--warmup", type=int, help="RSS growth counts from here (default N/5)")
    parser.add_argument("--quick", action="store_true", help="small run for a smoke check")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.sessions, args.slice = 2000, 40, 200
    if args.sessions % args.workers or args.slice % args.sessions or args.messages % args.slice:
        parser.error(
            "need --sessions a multiple of --workers, --slice of --sessions, --messages of --slice"
        )
    if args.messages < 2 * args.slice:
        parser.error("need at least two slices")
    if args.warmup is None:
        args.warmup = args.messages // 5
    args.window = Settings(_env_file=None).history_window
    args.batch = fold_batch(args.window)
    print(
        f"Soak: {args.messages} messages over {args.sessions} sessions, {args.workers} at once "
        f"({args.messages // args.sessions} per session, as many replies); window {args.window} "
        f"messages, folded {args.batch} at a time; slices of {args.slice}",
        flush=True,
    )
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = await soak(args, Path(tmp))
    goals = report(args, result)
    if args.json:
        meta = {
            "mode": "quick" if args.quick else "full",
            "messages": args.messages,
            "sessions": args.sessions,
            "workers": args.workers,
            "slice": args.slice,
            "warmup": args.warmup,
            "history_window": args.window,
            "fold_batch": args.batch,
            "finished_tasks_kept": FINISHED_TASKS_KEPT,
            "finished_events_kept": FINISHED_EVENTS_KEPT,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "seconds": time.perf_counter() - began,
        }
        args.json.write_text(json.dumps({"meta": meta, "goals": goals, **result}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
