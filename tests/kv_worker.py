"""A second process for the KV and presence tests.

    kv_worker.py hold <db> <session_id> <task_hash> <instance_id> <ttl> <refresh>
        Hold a presence key, print `HELD`, then one line `SEES <json list of running tasks>`,
        and keep holding until stdin closes; then release, print `RELEASED` and exit.

    kv_worker.py hammer <db> <key_prefix> <count>
        Write <count> keys as fast as possible, print `DONE <count>` and exit.

Lines go to stdout, logs to stderr.
"""

from __future__ import annotations

import asyncio
import json
import sys

from gateway.logs import configure_logging
from gateway.presence import Presence
from gateway.settings import LogFormat
from gateway.store.kv import SqliteKV


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def hold(args: list[str]) -> None:
    db, session_id, task_hash, instance_id, ttl, refresh = args
    async with await SqliteKV.open(db) as kv:
        presence = Presence(kv, instance_id, ttl=float(ttl), refresh=float(refresh))
        async with presence.hold(session_id, task_hash):
            say("HELD")
            say("SEES " + json.dumps(await presence.running_tasks()))
            await asyncio.to_thread(sys.stdin.read)
    say("RELEASED")


async def hammer(args: list[str]) -> None:
    db, key_prefix, count = args
    async with await SqliteKV.open(db) as kv:
        for i in range(int(count)):
            await kv.set(f"{key_prefix}{i}", str(i), ttl=None if i % 2 else 60.0)
    say(f"DONE {count}")


def main() -> None:
    configure_logging("WARNING", LogFormat.console)
    mode, *args = sys.argv[1:]
    if mode == "hold":
        asyncio.run(hold(args))
    elif mode == "hammer":
        asyncio.run(hammer(args))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
