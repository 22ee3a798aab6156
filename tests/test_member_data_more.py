"""The erasure reaches every copy of a member's words, not only the rows they wrote: the
subagent sessions their tasks started, the agent quoting them in someone else's task (the
reply, the tool result, the cached result), the terminal's input history, a question they
answered, a remembered tool failure naming their words, the names of their sessions and the
backends' resume state. Driven over the real HTTP API and the terminal's own client."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from test_http import ANN, BOB, Server, serving
from test_member_data import files_holding, rows_holding

from adapters.http_client import GatewayClient
from gateway.engine.subagents import child_session_id
from gateway.store.member_data import ERASED


async def send(srv: Server, who: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    status, reply = await srv.call("POST", "/v1/send", json_body=body, headers=who)
    assert status in (200, 202), reply
    return dict(reply)


async def kv_holding(srv: Server, needle: str) -> list[str]:
    """The KV keys whose value holds `needle` (a Redis KV has no file under the home)."""
    return [k for k, v in (await srv.runtime.kv.scan("")).items() if needle in v]


async def test_forget_me_reaches_every_copy_of_their_words(
    tmp_path: Path, database_url: str
) -> None:
    ann = f"ann-zq{secrets.token_hex(6)}"
    bob = f"bob-zq{secrets.token_hex(6)}"
    async with serving(tmp_path, database_url=database_url) as srv:
        url = srv.runtime.settings.resolved_database_url
        status, made = await srv.call("POST", "/v1/session", json_body={}, headers=ANN)
        assert status == 201, made
        mine = made["session_id"]

        # Typed in the terminal: its client keeps the line in the input history, then sends.
        async with GatewayClient(srv.base, "agv_test-ann") as terminal:
            await terminal.update_session(mine, name=f"{ann} project")
            assert await terminal.add_input(mine, f"{ann} typed") == [f"{ann} typed"]
        reply = await send(srv, ANN, {"content": f"{ann} typed", "session_id": mine})
        assert reply["text"] == f"echo: {ann} typed"

        # A subagent: its session holds the sub-task, which is their words.
        reply = await send(srv, ANN, {"content": f"!delegate {ann} sub", "session_id": mine})
        assert reply["text"] == f"delegated: echo: {ann} sub", reply
        child = child_session_id(reply["task_hash"], "#0")
        first = (await srv.runtime.store.recent_messages(child, 100))[0]
        assert first.content == f"{ann} sub"

        # A question of theirs, answered over the API.
        asked = await send(srv, ANN, {"content": "!ask which?", "session_id": mine})
        assert asked["pending"]["kind"] == "ask_user", asked
        status, body = await srv.call(
            "POST",
            f"/v1/session/{mine}/pending/{asked['task_hash']}",
            json_body={"answer": f"{ann} answer"},
            headers=ANN,
        )
        assert status == 200, body
        status, view = await srv.call(
            "GET", f"/v1/session/{mine}/task/{asked['task_hash']}?wait=10", headers=ANN
        )
        assert view["text"] == f"answer: {ann} answer", view

        # A tool failure naming their words, remembered by the error memory.
        failing = {"name": f"{ann}-missing.txt"}
        reply = await send(
            srv, ANN, {"content": f"!tool read_file {json.dumps(failing)}", "session_id": mine}
        )
        assert ann in reply["text"], reply

        # Bob's session, shared with ann: she writes there, and the agent quotes her in bob's
        # task (its reply, the tool result, the cached result).
        bobs = (await send(srv, BOB, {"content": f"{bob} mine", "persist": True}))["session_id"]
        await srv.share(bobs, "ann", by=BOB)
        await send(srv, ANN, {"content": f"{ann} shared", "session_id": bobs})
        search = {"query": "shared"}
        quoted = await send(
            srv, BOB, {"content": f"!tool search_history {json.dumps(search)}", "session_id": bobs}
        )
        assert f"{ann} shared" in quoted["text"], quoted

        # A Claude Code resume file: the conversation's fingerprints and the last answer.
        srv.runtime.store.files(mine).write_resume_state(
            "sonnet",
            "",
            {"session_id": "cli-1", "fingerprints": [], "last_answer": f"echo: {ann} typed"},
            with_tools=True,
        )

        # The scans see every copy before.
        assert files_holding(tmp_path, ann.encode())
        assert await rows_holding(url, ann)
        assert await kv_holding(srv, ann)
        assert any(ann in m.content for m in await srv.runtime.store.recent_messages(child, 100))

        status, done = await srv.call(
            "POST", "/v1/me/forget", json_body={"confirm": True}, headers=ANN
        )
        assert status == 200, done
        counts = done["counts"]
        assert counts["inputs"] >= 1 and counts["resume_files"] == 1, counts
        assert counts["session_names"] == 1 and counts["tool_memory"] >= 1, counts

        assert files_holding(tmp_path, ann.encode()) == []
        assert await rows_holding(url, ann) == []
        assert await kv_holding(srv, ann) == []
        assert await srv.runtime.store.search.messages(ann) == []

        # Bob's own words stay; the agent's answer to him keeps its place, without the quote.
        assert await rows_holding(url, bob)
        bob_messages = [m.content for m in await srv.runtime.store.recent_messages(bobs, 100)]
        assert f"{bob} mine" in bob_messages
        answer = [c for c in bob_messages if c.startswith("search_history:")]
        assert answer and ERASED in answer[0], bob_messages
        # The child's words are gone, its place kept.
        assert {m.content for m in await srv.runtime.store.recent_messages(child, 100)} == {ERASED}
        # The session goes on, its input history from scratch.
        async with GatewayClient(srv.base, "agv_test-ann") as terminal:
            assert await terminal.inputs(mine) == []
        reply = await send(srv, ANN, {"content": "after", "session_id": mine})
        assert reply["text"] == "echo: after"
