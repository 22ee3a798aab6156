"""The command line as a whole process: `agenvoy --help`, `send`, `pending`, `approve` and
`deny` against a running gateway, next to the floor `python -c "import aiohttp"` (the one
library a client of the HTTP API cannot do without), measured in the same run.

    .venv/bin/python bench/cli_startup.py [--runs N] [--quick] [--json FILE]

Each command and the floor run in turn, round after round, so a noisy neighbour hits them
alike; the median wall time of each is reported with its ratio to the floor's median. Goal:
each at most 1.5 times the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

EXE = shutil.which("agenvoy") or str(Path(sys.executable).with_name("agenvoy"))
GOAL = 1.5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str) -> None:
    for _ in range(300):
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the gateway did not come up")


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="a few runs, for a smoke check")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    with tempfile.TemporaryDirectory() as home:
        port = free_port()
        env = {
            **os.environ,
            "AGENVOY_HOME": home,
            "AGENVOY_HTTP_PORT": str(port),
            "NO_PROXY": "127.0.0.1,localhost",
        }
        gateway = subprocess.Popen(
            [EXE, "run"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_healthy(f"http://127.0.0.1:{port}")
            no_task = "0" * 64  # answers "no such task": the whole client round trip all the same
            commands = {
                "floor: import aiohttp": [sys.executable, "-c", "import aiohttp"],
                "agenvoy --help": [EXE, "--help"],
                "agenvoy send hi": [EXE, "send", "hi"],
                "agenvoy pending": [EXE, "pending"],
                "agenvoy approve": [EXE, "approve", "cli-bench", no_task],
                "agenvoy deny": [EXE, "deny", "cli-bench", no_task],
            }
            times: dict[str, list[float]] = {name: [] for name in commands}
            for argv in commands.values():  # warm-up: caches, the first session
                timed(argv, env)
            for _ in range(runs):
                for name, argv in commands.items():
                    times[name].append(timed(argv, env))
        finally:
            gateway.terminate()
            gateway.wait(20)
    floor = statistics.median(times["floor: import aiohttp"])
    results = {}
    print(f"{'command':<26} {'median s':>9} {'vs floor':>9}")
    for name, values in times.items():
        median = statistics.median(values)
        results[name] = {"median_s": median, "ratio": median / floor}
        mark = "" if name.startswith("floor") or median / floor <= GOAL else "  (above goal)"
        print(f"{name:<26} {median:9.3f} {median / floor:8.2f}x{mark}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
