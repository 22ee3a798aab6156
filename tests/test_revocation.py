"""Revoking a token ends at once what it holds open, through the real HTTP front-end: its
event streams close within a second with a last `revoked` frame, a request it has waiting
answers 403, and the schedules it made are suspended (at once, or at the next start for a
token removed while no gateway ran) until a gateway admin resumes them. Its schedule quotas
refuse with the limit's name."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support import wait_until
from test_http import BOB, ROOT, Server, err, next_frame, serving
from typer.testing import CliRunner

from gateway.cli import app as cli_app

WITHIN = 1.0  # seconds from `agenvoy token remove` to the stream's end


async def _bob_session(srv: Server) -> str:
    status, made = await srv.call("POST", "/v1/session", json_body={}, headers=BOB)
    assert status in (200, 201), made
    sid: str = made["session_id"]
    return sid


async def _schedules(srv: Server, sid: str) -> list[dict[str, Any]]:
    status, listed = await srv.call("GET", f"/v1/session/{sid}/schedules", headers=ROOT)
    assert status == 200, listed
    found: list[dict[str, Any]] = listed["schedules"]
    return found


async def test_a_revoked_tokens_stream_closes_within_a_second_and_its_schedule_is_suspended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(tmp_path) as srv:
        monkeypatch.setenv("AGENVOY_HOME", str(srv.runtime.settings.home))
        sid = await _bob_session(srv)
        body = {"spec": "every 1h", "prompt": "bob was here"}
        status, made = await srv.call(
            "POST", f"/v1/session/{sid}/schedules", json_body=body, headers=BOB
        )
        assert status == 201 and made["suspended"] is False, made
        log = await srv.client.get(srv.url(f"/v1/session/{sid}/log?tail=0"), headers=BOB)
        assert log.status == 200
        frame = await next_frame(log)
        assert frame is not None and frame.comments == ["live"]
        # A long wait too: bob's task sleeps, bob's request waits for its end.
        waiting = asyncio.create_task(
            srv.call(
                "POST",
                "/v1/send",
                json_body={"content": "!sleep 600", "session_id": sid, "wait": 300},
                headers=BOB,
            )
        )

        async def running() -> bool:
            return srv.runtime.router.running_task(sid) is not None

        assert await wait_until(running, within=5)
        loop = asyncio.get_running_loop()
        revoked_at = loop.time()
        removed = await asyncio.to_thread(CliRunner().invoke, cli_app, ["token", "remove", "bob"])
        assert removed.exit_code == 0, removed.output
        last = None
        while (frame := await next_frame(log)) is not None:
            last = frame
        ended_in = loop.time() - revoked_at
        assert ended_in < WITHIN, ended_in
        assert last is not None and last.event == "revoked", last
        status, answer = await asyncio.wait_for(waiting, WITHIN)
        assert (status, err(answer)) == (403, "forbidden")
        log.close()

        async def suspended() -> bool:
            return bool((await _schedules(srv, sid))[0]["suspended"])

        assert await wait_until(suspended, within=WITHIN)
        [held] = await _schedules(srv, sid)
        assert "revoked" in held["suspended_reason"] and held["created_by"] == "http:bob"
        # bob can answer nothing any more; nobody but a gateway admin resumes the schedule.
        status, _ = await srv.call("POST", "/v1/send", json_body={"content": "hi"}, headers=BOB)
        assert status == 403
        path = f"/v1/session/{sid}/schedules/{held['id']}/resume"
        status, answer = await srv.call("POST", path, json_body={}, headers=ROOT)
        assert (status, err(answer)) == (409, "conflict")  # bob holds no token
        assert "holds no credential" in answer["error"]["message"]
        take: dict[str, Any] = {"take_over": True}
        status, resumed = await srv.call("POST", path, json_body=take, headers=ROOT)
        assert status == 200, resumed
        assert resumed["suspended"] is False and resumed["created_by"] == "http:root"


async def test_a_token_removed_while_no_gateway_ran_has_its_schedules_suspended_at_start(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as srv:
        sid = await _bob_session(srv)
        body = {"spec": "@daily", "prompt": "bob was here"}
        status, _ = await srv.call(
            "POST", f"/v1/session/{sid}/schedules", json_body=body, headers=BOB
        )
        assert status == 201
    # `agenvoy token remove bob` while no gateway runs.
    home = str(tmp_path / "home")
    removed = await asyncio.to_thread(
        CliRunner().invoke, cli_app, ["token", "remove", "bob"], env={"AGENVOY_HOME": home}
    )
    assert removed.exit_code == 0, removed.output
    async with serving(tmp_path, users=None) as srv:
        [held] = await _schedules(srv, sid)
        assert held["suspended"] is True and held["created_by"] == "http:bob"
        assert await srv.runtime.schedules.fire_due() == 0


async def test_schedule_quotas_refuse_with_the_limit_named(tmp_path: Path) -> None:
    async with serving(
        tmp_path, max_schedules_per_identity=1, min_schedule_interval_seconds=600
    ) as srv:
        sid = await _bob_session(srv)
        path = f"/v1/session/{sid}/schedules"
        often = {"spec": "every 5m", "prompt": "too often"}
        status, answer = await srv.call("POST", path, json_body=often, headers=BOB)
        assert (status, err(answer)) == (429, "schedule_quota")
        assert "AGENVOY_MIN_SCHEDULE_INTERVAL_SECONDS" in answer["error"]["message"]
        first = {"spec": "every 10m", "prompt": "one"}
        assert (await srv.call("POST", path, json_body=first, headers=BOB))[0] == 201
        second = {"spec": "@daily", "prompt": "two"}
        status, answer = await srv.call("POST", path, json_body=second, headers=BOB)
        assert (status, err(answer)) == (429, "schedule_quota")
        assert "AGENVOY_MAX_SCHEDULES_PER_IDENTITY" in answer["error"]["message"]
        # A gateway admin is held to neither.
        status, answer = await srv.call("POST", "/v1/session", json_body={}, headers=ROOT)
        root_path = f"/v1/session/{answer['session_id']}/schedules"
        for spec in ("every 1m", "every 2m"):
            body = {"spec": spec, "prompt": "admin"}
            status, made = await srv.call("POST", root_path, json_body=body, headers=ROOT)
            assert status == 201, made
        assert len(await srv.runtime.store.schedules.all()) == 3
