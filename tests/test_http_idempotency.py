"""`Idempotency-Key` over a real socket: a request sent again is answered with what the first
one made, never a second task or schedule; keys are the caller's own and last 24 hours; and a
COMMIT whose answer was lost (PostgreSQL behind a relay that cuts right after it) is reported
as such, and settled by sending the request again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from clock import FakeClock
from conftest import RelayedDatabase
from patience import patient
from test_cli_output import invoke
from test_http import ANN, BOB, Server, bearer, err, serving

from gateway.store.request_keys import KEEP_MS

KEY = "0f8e6a52-2c4d-4b8e-9d39-7c1f1b7b6a10"


def keyed(headers: dict[str, str], key: str = KEY) -> dict[str, str]:
    return {**headers, "Idempotency-Key": key}


async def history(server: Server, sid: str) -> list[tuple[str, str]]:
    status, body = await server.call("GET", f"/v1/session/{sid}/history", headers=ROOT)
    assert status == 200, body
    return [(m["role"], m["content"]) for m in body["messages"]]


ROOT = bearer("root")


async def test_a_send_retried_after_a_client_timeout_is_one_task_and_one_reply(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    async with serving(tmp_path, clock) as server:
        sent = {"content": "!sleep 5", "session_id": "chat-retried"}
        url = server.url("/v1/send")
        # The client gives up while the task runs (its sleep waits on the test's clock).
        impatient = aiohttp.ClientTimeout(total=0.5)
        with pytest.raises(asyncio.TimeoutError):
            async with server.client.post(url, json=sent, headers=keyed(ANN), timeout=impatient):
                pass
        status, again = await server.call(
            "POST", "/v1/send", json_body={**sent, "wait": 0}, headers=keyed(ANN)
        )
        assert status == 202 and again["status"] in {"queued", "running"}, again
        task = again["task_hash"]
        await clock.until_sleeping(1, seconds=1)  # `!sleep` sleeps a second at a time
        for _ in range(5):
            await clock.until_sleeping(1, seconds=1)
            await clock.advance(1)
        status, done = await server.call("POST", "/v1/send", json_body=sent, headers=keyed(ANN))
        assert status == 200, done
        assert (done["session_id"], done["task_hash"]) == ("chat-retried", task)
        assert (done["status"], done["text"]) == ("done", "slept 5s")
        assert await history(server, "chat-retried") == [
            ("user", "!sleep 5"),
            ("assistant", "slept 5s"),
        ]


async def test_keys_are_the_callers_own_and_another_request_under_one_is_refused(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as server:
        status, ann = await server.call(
            "POST", "/v1/send", json_body={"content": "hello"}, headers=keyed(ANN)
        )
        assert status == 200 and ann["text"] == "echo: hello", ann
        status, twice = await server.call(
            "POST", "/v1/send", json_body={"content": "hello"}, headers=keyed(ANN)
        )
        assert status == 200, twice
        assert (twice["session_id"], twice["task_hash"]) == (ann["session_id"], ann["task_hash"])
        assert twice["status"] == "done"
        # Bob's key is his own, whatever Ann did with the same one.
        status, bob = await server.call(
            "POST", "/v1/send", json_body={"content": "hello"}, headers=keyed(BOB)
        )
        assert status == 200 and bob["text"] == "echo: hello", bob
        assert bob["task_hash"] != ann["task_hash"]
        assert bob["session_id"] != ann["session_id"]
        # The same key with another request: refused, and nothing of it is stored.
        status, body = await server.call(
            "POST",
            "/v1/send",
            json_body={"content": "goodbye", "session_id": ann["session_id"]},
            headers=keyed(ANN),
        )
        assert (status, err(body)) == (422, "idempotency_mismatch")
        assert await history(server, ann["session_id"]) == [
            ("user", "hello"),
            ("assistant", "echo: hello"),
        ]
        for bad in ("", "é", "x" * 256):
            status, body = await server.call(
                "POST",
                "/v1/send",
                data=json.dumps({"content": "hi"}).encode(),
                headers={**ANN, "Idempotency-Key": bad},
            )
            assert (status, err(body)) == (400, "bad_request"), bad


async def test_one_key_sent_several_times_at_once_makes_one_task(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        sent = {"content": "at once", "session_id": "chat-burst"}
        answers = await asyncio.gather(
            *(server.call("POST", "/v1/send", json_body=sent, headers=keyed(ANN)) for _ in range(8))
        )
        assert {status for status, _ in answers} == {200}, answers
        assert len({body["task_hash"] for _, body in answers}) == 1
        assert await history(server, "chat-burst") == [
            ("user", "at once"),
            ("assistant", "echo: at once"),
        ]


async def test_a_key_is_free_again_after_24_hours(tmp_path: Path) -> None:
    clock = FakeClock()
    async with serving(tmp_path, clock) as server:
        sent = {"content": "daily", "session_id": "chat-daily"}
        status, first = await server.call("POST", "/v1/send", json_body=sent, headers=keyed(ANN))
        assert status == 200 and first["text"] == "echo: daily", first
        await clock.advance(KEEP_MS / 1000 - 1)
        status, same = await server.call("POST", "/v1/send", json_body=sent, headers=keyed(ANN))
        assert status == 200 and same["task_hash"] == first["task_hash"], same
        await clock.advance(2)
        status, later = await server.call("POST", "/v1/send", json_body=sent, headers=keyed(ANN))
        assert status == 200 and later["text"] == "echo: daily", later
        assert later["task_hash"] != first["task_hash"]
        assert [role for role, _ in await history(server, "chat-daily")] == [
            "user",
            "assistant",
            "user",
            "assistant",
        ]


async def test_a_schedule_made_again_with_its_key_is_the_same_schedule(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        status, made = await server.call("POST", "/v1/session", headers=ANN)
        sid = made["session_id"]
        path = f"/v1/session/{sid}/schedules"
        asked = {"spec": "every 30m", "prompt": "check the queue"}
        status, first = await server.call("POST", path, json_body=asked, headers=keyed(ANN))
        assert status == 201, first
        status, again = await server.call("POST", path, json_body=asked, headers=keyed(ANN))
        assert (status, again["id"]) == (201, first["id"]), again
        status, body = await server.call(
            "POST", path, json_body={**asked, "spec": "every 5m"}, headers=keyed(ANN)
        )
        assert (status, err(body)) == (422, "idempotency_mismatch")
        status, listed = await server.call("GET", path, headers=ANN)
        assert [s["id"] for s in listed["schedules"]] == [first["id"]]


async def test_a_retry_after_a_commit_whose_answer_was_lost_answers_with_the_stored_task(
    tmp_path: Path, relayed_database: RelayedDatabase
) -> None:
    relay = relayed_database.relay
    async with serving(
        tmp_path, database_url=relayed_database.relayed, lease_ttl_seconds=60
    ) as server:
        sent = {"content": "are you there", "session_id": "chat-cut"}
        # The transaction that stores the message and its task (its first, on a new connection).
        cut = relay.cut_after_commit(b"INSERT INTO task_journal")
        first = await post(server, sent, keyed(ANN))
        assert cut.is_set()
        status, body, headers = first
        assert (status, err(body)) == (503, "outcome_unknown"), body
        assert headers["X-Agenvoy-Session"] == "chat-cut"
        task = headers["X-Agenvoy-Task"]
        await relay.restore()
        status, body, _ = await post(server, sent, keyed(ANN))
        assert status == 200, body
        assert (body["task_hash"], body["status"]) == (task, "done")
        assert body["text"] == "echo: are you there"
        assert await history(server, "chat-cut") == [
            ("user", "are you there"),
            ("assistant", "echo: are you there"),
        ]
        # history.json, whose folder the cut-off first message never made, agrees.
        filed = await asyncio.to_thread(server.runtime.store.files("chat-cut").history.read)
        assert [(m.role, m.content) for m in filed] == await history(server, "chat-cut")


async def test_agenvoy_send_sends_again_with_its_key_after_a_commit_went_unanswered(
    tmp_path: Path, relayed_database: RelayedDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    relay = relayed_database.relay
    async with serving(
        tmp_path, database_url=relayed_database.relayed, lease_ttl_seconds=60
    ) as server:
        monkeypatch.setenv("AGENVOY_HOME", str(server.runtime.settings.home))
        monkeypatch.setenv("AGENVOY_HTTP_PORT", server.base.rsplit(":", 1)[1])
        cut = relay.cut_after_commit(b"INSERT INTO task_journal")
        args = ["send", "--session", "chat-cli", "are you there"]
        sending = asyncio.ensure_future(asyncio.to_thread(invoke, args))
        await asyncio.wait_for(cut.wait(), patient(10))
        await relay.restore()
        result = await asyncio.wait_for(sending, patient(20))
        # CliRunner mixes the command's stderr (and the gateway's log) into its output.
        lines = result.output.strip().splitlines()
        assert "no answer from the gateway yet; sending the message again" in lines
        assert lines[-1] == "echo: are you there"
        assert await history(server, "chat-cli") == [
            ("user", "are you there"),
            ("assistant", "echo: are you there"),
        ]


async def post(
    server: Server, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, Any, dict[str, str]]:
    async with server.client.post(server.url("/v1/send"), json=body, headers=headers) as resp:
        return resp.status, await resp.json(), dict(resp.headers)
