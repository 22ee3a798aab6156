"""The PostgreSQL floor of `http_load.py --database postgresql`: the SQLite floor's work
(`floor_server.py`) on PostgreSQL, in a process of its own — a bare aiohttp handler with one
asyncpg pool that, per message, commits the same two transactions as the gateway's path
(session + user message; usage + reply) and appends the two history.json lines (the message
and the reply), then answers with the same JSON shape.

    python bench/floor_server_pg.py DSN HISTORY_DIR PORT [POOL_SIZE]

DSN is a plain `postgresql://` address of a database that already has the gateway's schema
(`http_load.py` makes it with the gateway's migrations). Unlike SQLite, PostgreSQL commits
transactions from several connections at once, so messages share a pool of POOL_SIZE
connections (default: asyncpg's own 10; `http_load.py` gives one per session it drives)
instead of queueing for one connection.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
from aiohttp import web
from floor_server import serve

SESSION = "INSERT INTO session (id) VALUES ($1) ON CONFLICT DO NOTHING"
USER = (
    "INSERT INTO messages (session_id, role, content, sender, send_at) "
    "VALUES ($1, 'user', $2, '', $3)"
)
USAGE = "INSERT INTO usage (session_id, model, send_at) VALUES ($1, 'floor', $2)"
REPLY = (
    "INSERT INTO messages (session_id, role, content, sender, send_at) "
    "VALUES ($1, 'assistant', $2, '', $3)"
)
POOL_SIZE = 10  # asyncpg's own default


class Floor:
    def __init__(self, history_dir: Path) -> None:
        self.history_dir = history_dir
        self.pool: asyncpg.Pool | None = None  # opened with the application, on its loop

    def file(self, sid: str, role: str, content: str, now: int) -> None:
        # A few dozen bytes appended to a local file cost less than a hop to a thread would.
        line = json.dumps({"role": role, "content": content, "send_at": now}) + "\n"
        with (self.history_dir / f"{sid}.jsonl").open("a", encoding="utf-8") as out:
            out.write(line)

    async def send(self, request: web.Request) -> web.Response:
        body = await request.json()
        sid, text = str(body["session_id"]), str(body["content"])
        reply = f"echo: {text}"
        now = int(time.time() * 1000)
        assert self.pool is not None
        # One connection for the whole message: the least a pool can be asked for.
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute(SESSION, sid)
                await conn.execute(USER, sid, text, now)
            self.file(sid, "user", text, now)
            async with conn.transaction():
                await conn.execute(USAGE, sid, now)
                await conn.execute(REPLY, sid, reply, now)
            self.file(sid, "assistant", reply, now)
        return web.json_response({"session_id": sid, "status": "done", "text": reply})


def main() -> None:
    dsn, history_dir, port = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    pool_size = int(sys.argv[4]) if len(sys.argv) > 4 else POOL_SIZE
    history_dir.mkdir(parents=True, exist_ok=True)

    floor = Floor(history_dir)

    async def pooled(_app: web.Application) -> AsyncIterator[None]:
        floor.pool = await asyncpg.create_pool(dsn, min_size=pool_size, max_size=pool_size)
        yield
        await floor.pool.close()

    app = web.Application()
    app.cleanup_ctx.append(pooled)
    serve(app, floor.send, port)


if __name__ == "__main__":
    main()
