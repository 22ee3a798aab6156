"""Each member's data on request: the export gives them what they wrote and what they were
answered; the erasure leaves none of their text anywhere, in any file of the home or any
text column, full-text index or embedding of the database, while others' text stays."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from support import wait_until
from test_http import Server, bearer, serving
from typer.testing import CliRunner

from gateway.cli import app as cli_app
from gateway.store.db import Database
from gateway.store.member_data import ERASED

ANN, BOB = bearer("ann"), bearer("bob")


def files_holding(root: Path, needle: bytes) -> list[Path]:
    """Every file under `root` whose bytes hold `needle`."""
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def rows_holding(url: str, needle: str) -> list[str]:
    """`table.column` of every text column of every table holding `needle`."""
    from sqlalchemy import String, Text, inspect, text

    found: list[str] = []
    db = await Database.open(url, migrate=False)

    def scan(session: Any) -> None:
        conn = session.connection()
        inspector = inspect(conn)
        for table in inspector.get_table_names():
            for column in inspector.get_columns(table):
                if not isinstance(column["type"], String | Text):
                    continue
                name = column["name"]
                query = text(f'SELECT count(*) FROM "{table}" WHERE "{name}" LIKE :n')
                if conn.execute(query, {"n": f"%{needle}%"}).scalar_one():
                    found.append(f"{table}.{name}")

    try:
        await db.read(scan)
    finally:
        await db.close()
    return found


async def vectors_of(url: str, sessions: set[str]) -> set[bytes]:
    """The embedding vectors kept for the messages of `sessions`."""
    from sqlalchemy import bindparam, text

    db = await Database.open(url, migrate=False)
    query = text("SELECT vector FROM embedding WHERE session_id IN :s AND kind = 'message'")
    query = query.bindparams(bindparam("s", expanding=True))

    def read(session: Any) -> set[bytes]:
        return {bytes(row[0]) for row in session.connection().execute(query, {"s": [*sessions]})}

    try:
        return await db.read(read)
    finally:
        await db.close()


async def say(srv: Server, who: dict[str, str], body: dict[str, Any]) -> str:
    status, reply = await srv.call("POST", "/v1/send", json_body=body, headers=who)
    assert status == 200 and reply["status"] == "done", reply
    assert body["content"] in reply["text"]  # the offline agent repeats it: a reply quotes it
    return str(reply["session_id"])


async def test_forget_me_leaves_none_of_their_text_anywhere(
    tmp_path: Path, database_url: str
) -> None:
    ann_text = f"ann-zq{secrets.token_hex(6)}"
    bob_text = f"bob-zq{secrets.token_hex(6)}"
    # The SQLite database lies under tmp_path, which the scans cover with the home.
    async with serving(tmp_path, database_url=database_url, local_embeddings="off") as srv:
        url = srv.runtime.settings.resolved_database_url
        status, made = await srv.call("POST", "/v1/session", json_body={}, headers=ANN)
        assert status == 201
        sessions = {
            await say(srv, ANN, {"content": f"{ann_text} one"}),
            await say(srv, ANN, {"content": f"{ann_text} two", "persist": True}),
            await say(srv, ANN, {"content": f"{ann_text} three", "session_id": made["session_id"]}),
        }
        assert len(sessions) == 3
        bob_session = await say(srv, BOB, {"content": f"{bob_text} stays"})

        status, before = await srv.call("GET", "/v1/me/export", headers=ANN)
        assert status == 200 and before["identity"] == "http:ann"
        assert sorted(m["content"] for m in before["messages"]) == sorted(
            f"{ann_text} {n}" for n in ("one", "two", "three")
        )
        assert all(ann_text in m["content"] for m in before["replies"])
        assert {s["id"] for s in before["sessions_owned"]} >= {made["session_id"]}
        assert bob_text not in str(before)
        # The scans see the text before: what they miss afterwards is gone.
        assert files_holding(tmp_path, ann_text.encode())
        assert await rows_holding(url, ann_text)
        assert await srv.runtime.store.search.messages(ann_text)

        memory = srv.runtime.memory
        assert memory is not None

        async def embedded() -> bool:  # her three messages and the three replies
            await memory.indexer.embed_due()  # as the gateway's background job does
            return len(await vectors_of(url, sessions)) >= 6

        assert await wait_until(embedded, 30), "her messages were never embedded"
        vectors = await vectors_of(url, sessions)

        status, refused = await srv.call(
            "POST", "/v1/me/forget", json_body={"confirm": False}, headers=ANN
        )
        assert status == 400, refused
        status, done = await srv.call(
            "POST", "/v1/me/forget", json_body={"confirm": True}, headers=ANN
        )
        assert status == 200, done
        assert done["counts"]["own_messages"] == 3 and done["counts"]["replies"] >= 3
        assert done["counts"]["sessions"] == 3

        assert files_holding(tmp_path, ann_text.encode()) == []
        assert await rows_holding(url, ann_text) == []
        assert await srv.runtime.store.search.messages(ann_text) == []
        assert done["counts"]["embeddings"] >= 6
        assert vectors.isdisjoint(await vectors_of(url, sessions))  # nor made again since
        assert await srv.runtime.store.search.messages(bob_text)
        assert await rows_holding(url, bob_text)
        assert files_holding(tmp_path, bob_text.encode())

        # The audit says it happened and who asked, not what was said.
        for sid in sessions:
            log = srv.runtime.store.files(sid).action_log.read()
            audit = [r.body for r in log if r.body.startswith("erasure of identity http:ann")]
            assert len(audit) == 1 and "by http:ann" in audit[0]
        bob_log = srv.runtime.store.files(bob_session).action_log.read()
        assert not any(r.body.startswith("erasure") for r in bob_log)

        status, after = await srv.call("GET", "/v1/me/export", headers=ANN)
        assert status == 200 and len(after["messages"]) == 3
        assert {m["content"] for m in after["messages"] + after["replies"]} == {ERASED}
        # The conversation goes on after it.
        await say(srv, ANN, {"content": "after", "session_id": made["session_id"]})


async def test_the_shared_token_and_anonymous_callers_are_no_member(tmp_path: Path) -> None:
    async with serving(tmp_path, users=None) as srv:
        status, body = await srv.call("GET", "/v1/me/export")
        assert status == 403 and body["error"]["code"] == "not_a_member"
        status, body = await srv.call("POST", "/v1/me/forget", json_body={"confirm": True})
        assert status == 403 and body["error"]["code"] == "not_a_member"


async def test_forget_me_in_a_chat_asks_first_and_the_operator_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"bob-zq{secrets.token_hex(6)}"
    async with serving(tmp_path) as srv:
        sid = await say(srv, BOB, {"content": secret, "persist": True})
        monkeypatch.setenv("AGENVOY_HOME", str(srv.runtime.settings.home))
        exported = await asyncio.to_thread(CliRunner().invoke, cli_app, ["export", "http:bob"])
        assert exported.exit_code == 0, exported.output
        assert [m["content"] for m in json.loads(exported.output)["messages"]] == [secret]

        asked = {"content": "/forget-me", "session_id": sid}
        status, body = await srv.call("POST", "/v1/send", json_body=asked, headers=BOB)
        assert status == 200 and body["command"] == "forget_me", body
        assert "confirm" in body["text"] and "1 messages" in body["text"]
        assert await srv.runtime.store.search.messages(secret)  # nothing erased yet

        confirmed = {"content": "/forget-me confirm", "session_id": sid}
        status, body = await srv.call("POST", "/v1/send", json_body=confirmed, headers=BOB)
        assert status == 200 and body["ok"] is True, body
        assert await srv.runtime.store.search.messages(secret) == []
        assert files_holding(srv.runtime.settings.home, secret.encode()) == []
