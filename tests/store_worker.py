"""Appends N messages to one session from a separate process (used by test_db).

Prints `READY` once the store is open, then waits for a line on stdin before appending, so
the test can start several workers' appends at the same moment.
"""

from __future__ import annotations

import asyncio
import sys

from gateway.settings import Settings
from gateway.store.sessions import SessionStore


async def main(session_id: str, tag: str, count: int) -> None:
    store = await SessionStore.open(Settings(_env_file=None))
    try:
        # A process checks a session's history.json against the archive before its first
        # write; done here, before the writers contend, so what contends is only appends.
        await store.catch_up_history(session_id)
        sys.stdout.write("READY\n")
        sys.stdout.flush()
        await asyncio.to_thread(sys.stdin.readline)
        for i in range(count):
            await store.append_message(session_id, "user", f"{tag}-{i}", sender=tag)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
