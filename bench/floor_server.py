"""The floor of `http_load.py`: what a well-built server does for one message at the least, in a
process of its own — a bare aiohttp handler with one long-lived SQLite connection (the
gateway's pragmas, opened once) that, per message, commits the same two transactions as the
gateway's path (session + user message; usage + reply) and appends the two history.json lines
(the message and the reply), then answers with the same JSON shape.

    python bench/floor_server.py DB_PATH HISTORY_DIR PORT

The database must exist with the gateway's schema (`http_load.py` makes it). SQLite writes one
transaction at a time, so the connection lives on one worker thread and messages queue for it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.store.sqlite_setup import sqlite_pragmas

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

USER = (
    "INSERT INTO messages (session_id, role, content, sender, send_at) VALUES (?, 'user', ?, '', ?)"
)
USAGE = "INSERT INTO usage (session_id, model, send_at) VALUES (?, 'floor', ?)"
REPLY = (
    "INSERT INTO messages (session_id, role, content, sender, send_at) "
    "VALUES (?, 'assistant', ?, '', ?)"
)


class Floor:
    def __init__(self, db_path: Path, history_dir: Path) -> None:
        self.history_dir = history_dir
        self.worker = ThreadPoolExecutor(max_workers=1)
        self.conn = self.worker.submit(self._connect, db_path).result()

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in sqlite_pragmas():
            conn.execute(pragma)
        return conn

    def write(self, sid: str, text: str) -> None:
        now = int(time.time() * 1000)
        transactions: list[list[tuple[str, tuple[Any, ...]]]] = [
            [
                ("INSERT INTO session (id) VALUES (?) ON CONFLICT DO NOTHING", (sid,)),
                (USER, (sid, text, now)),
            ],
            [
                (USAGE, (sid, now)),
                (REPLY, (sid, f"echo: {text}", now)),
            ],
        ]
        history = self.history_dir / f"{sid}.jsonl"
        for number, statements in enumerate(transactions):
            self.conn.execute("BEGIN IMMEDIATE")
            for sql, params in statements:
                self.conn.execute(sql, params)
            self.conn.execute("COMMIT")
            # The message, then the reply, each filed after its commit.
            role, content = ("user", text) if number == 0 else ("assistant", f"echo: {text}")
            with history.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"role": role, "content": content, "send_at": now}) + "\n")

    async def send(self, request: web.Request) -> web.Response:
        body = await request.json()
        sid, text = str(body["session_id"]), str(body["content"])
        await asyncio.get_running_loop().run_in_executor(self.worker, self.write, sid, text)
        return web.json_response({"session_id": sid, "status": "done", "text": f"echo: {text}"})


def main() -> None:
    db_path, history_dir, port = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    history_dir.mkdir(parents=True, exist_ok=True)
    floor = Floor(db_path, history_dir)
    serve(web.Application(), floor.send, port)


def serve(app: web.Application, send: Handler, port: int) -> None:
    """Answer `POST /v1/send` with `send` and `GET /healthz`, on loopback, until stopped."""
    app.router.add_post("/v1/send", send)
    app.router.add_get("/healthz", lambda _request: _ok())
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


async def _ok() -> web.Response:
    return web.json_response({"status": "ok"})


if __name__ == "__main__":
    main()
