"""Whom each action was for, in the audit and the spend: every action.log line of a task, its
action_history row and its usage rows name the identity it acted for — the token's user, a
schedule's creator, a subagent's parent's requester — driven over the real HTTP API."""

from __future__ import annotations

import json
from pathlib import Path

from clock import FakeClock
from discord_rig import ANN as DISCORD_ANN
from discord_rig import GENERAL, general_only
from discord_rig import start_rig as discord_start
from discord_rig import stop_rig as discord_stop
from sqlmodel import Session, col, select
from support import wait_until
from test_http import ANN, BOB, Server, next_frame, serving

from gateway.engine.subagents import child_session_id
from gateway.events import Inbound, Origin
from gateway.member_data.files import redact_action_log
from gateway.store.action_record import ActionRecord, parse_line
from gateway.store.actionlog import ActionLog
from gateway.store.models import ActionHistoryRow, UsageRow

HOUR = 3600.0


async def _runs(srv: Server, session_id: str) -> list[tuple[str, str]]:
    """(task_hash, identity) of each action_history row of the session."""

    def work(session: Session) -> list[tuple[str, str]]:
        stmt = select(ActionHistoryRow).where(col(ActionHistoryRow.session_id) == session_id)
        return [(row.task_hash, row.identity) for row in session.exec(stmt)]

    return await srv.runtime.store.db.read(work)


async def _usage(srv: Server, session_id: str) -> list[tuple[str, str]]:
    """(task_hash, identity) of each usage row of the session."""

    def work(session: Session) -> list[tuple[str, str]]:
        stmt = select(UsageRow).where(col(UsageRow.session_id) == session_id)
        return [(row.task_hash, row.identity) for row in session.exec(stmt)]

    return await srv.runtime.store.db.read(work)


def _logged(srv: Server, session_id: str) -> list[ActionRecord]:
    return srv.runtime.store.files(session_id).action_log.read()


async def test_a_token_users_message_names_them_in_the_log_the_run_and_the_usage(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as srv:
        status, body = await srv.call("POST", "/v1/send", json_body={"content": "hi"}, headers=ANN)
        assert status == 200, body
        sid, task = body["session_id"], body["task_hash"]
        records = _logged(srv, sid)
        assert [r.kind for r in records] == ["user", "text", "done"]
        assert {(r.task_hash, r.identity) for r in records} == {(task, "http:ann")}
        raw = srv.runtime.store.files(sid).action_log.path.read_text().splitlines()
        assert all(f"][{task}][http:ann] " in line for line in raw), raw
        assert await _runs(srv, sid) == [(task, "http:ann")]
        assert await _usage(srv, sid) == [(task, "http:ann")]
        # The replay of the live log says whom each record was for.
        await srv.share(sid, "tester", by=ANN)
        async with srv.client.get(srv.url(f"/v1/session/{sid}/log?tail=3")) as resp:
            assert resp.status == 200
            replay = [await next_frame(resp) for _ in range(3)]
        assert [f.json["identity"] for f in replay if f is not None] == ["http:ann"] * 3


async def test_a_subagent_acts_for_its_parents_requester(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        status, body = await srv.call(
            "POST", "/v1/send", json_body={"content": "!delegate count"}, headers=BOB
        )
        assert status == 200 and body["text"] == "delegated: echo: count", body
        parent, task = body["session_id"], body["task_hash"]
        child = child_session_id(task, "#0")
        child_records = _logged(srv, child)
        assert [r.kind for r in child_records] == ["user", "text", "done"]
        assert {r.identity for r in child_records} == {"http:bob"}
        assert [identity for _, identity in await _runs(srv, child)] == ["http:bob"]
        # The child's model call is spent for bob, under the parent's task.
        assert await _usage(srv, child) == [(task, "http:bob")]
        assert await _runs(srv, parent) == [(task, "http:bob")]
        assert {r.identity for r in _logged(srv, parent)} == {"http:bob"}


async def test_a_scheduled_firing_acts_for_the_schedules_creator(tmp_path: Path) -> None:
    clock = FakeClock()
    async with serving(tmp_path, clock, min_schedule_interval_seconds=0) as srv:
        status, made = await srv.call("POST", "/v1/session", json_body={}, headers=BOB)
        assert status == 201, made
        sid = made["session_id"]
        path = f"/v1/session/{sid}/schedules"
        schedule = {"spec": "every 1h", "prompt": "the hourly check"}
        status, answer = await srv.call("POST", path, json_body=schedule, headers=BOB)
        assert status == 201, answer
        await clock.advance(HOUR)
        await srv.runtime.schedules.fire_due()

        async def ran() -> bool:
            return len(await _runs(srv, sid)) == 1

        assert await wait_until(ran)
        [(task, identity)] = await _runs(srv, sid)
        assert identity == "http:bob"
        assert await _usage(srv, sid) == [(task, "http:bob")]
        records = [r for r in _logged(srv, sid) if r.task_hash == task]
        assert [r.kind for r in records] == ["user", "text", "done"]
        assert {r.identity for r in records} == {"http:bob"}


async def test_a_message_kept_as_context_names_its_writer(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        origin = Origin("telegram", channel_id="-7", sender_id="42", sender_name="Zoe")
        assert await srv.runtime.router.record(Inbound(origin, "tg--7", "just saying")) is not None
        [record] = _logged(srv, "tg--7")
        assert (record.kind, record.body, record.identity) == ("user", "just saying", "telegram:42")


def test_old_and_new_lines_read_side_by_side(tmp_path: Path) -> None:
    log_dir = tmp_path / "cli-a"
    log_dir.mkdir()
    log = ActionLog(log_dir / "action.log")
    log.path.write_text(
        "[2024-01-01 00:00:00.000][w1][user] from before task hashes\n"
        "[2024-01-01 00:00:01.000][w1][text][t1] from before identities\n"
        "[2024-01-01 00:00:02.000][][done][t1]\n"
    )
    log.append("user", '{"text":"hi"}', window_hash="w1", task_hash="t2", identity="http:ann")
    log.append("done", "", task_hash="t2", identity="terminal:j doe]")
    log.append("error", "delivery failed", task_hash="t2")
    records, skipped = log.read_with_errors()
    assert skipped == 0
    assert [(r.task_hash, r.identity, r.body) for r in records] == [
        ("", "", "from before task hashes"),
        ("t1", "", "from before identities"),
        ("t1", "", ""),
        ("t2", "http:ann", '{"text":"hi"}'),
        ("t2", "terminal:j doe]", ""),
        ("t2", "", "delivery failed"),
    ]
    lines = log.path.read_text().splitlines()
    # Characters that could end the bracket or the line are written as %XX.
    assert lines[4].endswith("[done][t2][terminal:j%20doe%5D]")
    # The gateway's own lines are written as before: no identity bracket.
    assert lines[5].endswith("[error][t2] delivery failed")
    odd = parse_line("[2024-01-01 00:00:00.000][][user][t3][telegram%3A%F0%9F%98%80] x")
    assert odd is not None and odd.identity == "telegram:\U0001f600"
    assert parse_line(odd.format_line()) == odd


def test_erasure_blanks_the_body_and_keeps_whom_it_was_for(tmp_path: Path) -> None:
    log_dir = tmp_path / "cli-a"
    log_dir.mkdir()
    log = ActionLog(log_dir / "action.log")
    log.append("user", '{"text":"my secret"}', task_hash="t1", identity="http:ann")
    log.append("user", '{"text":"other"}', task_hash="t2", identity="http:bob")
    assert redact_action_log(log, {"t1"}, ()) == 1
    erased, kept = log.read()
    assert erased.identity == "http:ann" and "my secret" not in erased.body
    assert (kept.identity, json.loads(kept.body)["text"]) == ("http:bob", "other")
    assert "my secret" not in log.path.read_text()


async def test_the_gateways_own_lines_name_whom_they_concern(tmp_path: Path) -> None:
    """A turned-away message and an erasure: their lines name the member they are about."""
    async with serving(tmp_path) as srv:
        status, body = await srv.call(
            "POST", "/v1/send", json_body={"content": "hi", "persist": True}, headers=BOB
        )
        assert status == 200, body
        sid = body["session_id"]
        assert srv.runtime.bans is not None
        await srv.runtime.bans.ban("*", "http:bob", by="http:root")
        turned_away = {"content": "let me in", "session_id": sid}
        status, body = await srv.call("POST", "/v1/send", json_body=turned_away, headers=BOB)
        assert status == 403 and body["error"]["code"] == "banned", body
        [banned] = [r for r in _logged(srv, sid) if r.kind == "banned"]
        assert banned.identity == "http:bob"

        status, body = await srv.call(
            "POST", "/v1/send", json_body={"content": "mine", "persist": True}, headers=ANN
        )
        assert status == 200, body
        mine = body["session_id"]
        status, body = await srv.call(
            "POST", "/v1/me/forget", json_body={"confirm": True}, headers=ANN
        )
        assert status == 200, body
        [erasure] = [r for r in _logged(srv, mine) if r.body.startswith("erasure of identity")]
        assert (erasure.kind, erasure.identity) == ("system", "http:ann")


async def test_a_delivery_that_failed_for_good_names_whom_the_reply_was_for(
    tmp_path: Path,
) -> None:
    async with general_only() as fake:
        rig = await discord_start(fake, tmp_path / "home", clock=FakeClock())
        try:
            fake.fail_next(
                "POST /channels/{id}/messages",
                403,
                when=lambda body: str(body.get("content", "")).startswith("echo:"),
            )
            fake.inject_message(GENERAL, DISCORD_ANN, "anyone?", mentions_bot=True)
            session = f"dc-{GENERAL}"

            def failures() -> list[ActionRecord]:
                records = rig.runtime.store.files(session).action_log.read()
                return [r for r in records if r.kind == "error" and "refused by discord" in r.body]

            async def ended() -> bool:
                return bool(failures())

            assert await wait_until(ended, 10)
            [failed] = failures()
            assert failed.identity == f"discord:{DISCORD_ANN['id']}" and failed.task_hash
        finally:
            await discord_stop(rig)
