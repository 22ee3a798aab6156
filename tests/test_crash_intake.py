"""A real gateway killed (SIGKILL, by itself) at each step of taking a message in — received,
bans read, quotas counted, committed, stored — and started again, on SQLite and on PostgreSQL +
Redis: the message was either stored and is answered, or was never acknowledged and the
client's retry with its Idempotency-Key stores it; either way there is one message and one
task, its session is owned by the sender, every stored message names its sender, the retry is
not refused by a quota that counted the message twice, and action.log has the message's line
once, before its reply's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import Backends
from gateway_proc import Gateway, free_port
from sqlmodel import select
from test_crash_matrix import OPENING, assert_consistent, open_archive
from test_http import bearer, write_tokens

from gateway.store.actionlog import ActionLog
from gateway.store.models import MessageRow, SessionRow
from gateway.store.quotas import Quotas

pytestmark = pytest.mark.slow

STEPS = ("received", "screened", "admitted", "committed", "stored")
WAIT = 20.0
# One session and one message a minute: a message counted twice would be refused.
QUOTAS = {"AGENVOY_QUOTA_SESSIONS": "1", "AGENVOY_QUOTA_MESSAGES_PER_MINUTE": "1"}
REQUEST = {"content": "hello", "persist": True, "wait": 10}


async def send(gateway: Gateway, http: aiohttp.ClientSession) -> tuple[int, Any] | None:
    """Bob's message under one Idempotency-Key; None when the crash cut the call off."""
    headers = {**bearer("bob"), "Idempotency-Key": "intake-1"}
    try:
        async with http.post(gateway.url + "/v1/send", json=REQUEST, headers=headers) as resp:
            return resp.status, await resp.json()
    except (TimeoutError, aiohttp.ClientError):
        return None


async def killed_at(tmp_path: Path, backend: dict[str, str], step: str) -> None:
    home = tmp_path / "home"
    write_tokens(home / ".store", {"bob": "Bob"})
    gateway = Gateway(home, free_port())
    gateway.env.update({**backend, **QUOTAS})
    try:
        await gateway.start(AGENVOY_CRASH_AT=step)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as http:
            assert await send(gateway, http) is None  # died before answering
            assert await gateway.died() == -9
            await gateway.start()
            first = await send(gateway, http)  # the client sends it again, same key
            assert first is not None and first[0] == 200, first
            assert first[1]["text"] == "echo: hello", first
            again = await send(gateway, http)
            assert again is not None and again[0] == 200, again
            assert again[1]["task_hash"] == first[1]["task_hash"]
            await gateway.stop()
    finally:
        await gateway.close()
    sid = first[1]["session_id"]
    store = await open_archive(home, backend)
    try:
        assert await assert_consistent(store, sid) == [
            ("user", "hello"),
            ("assistant", "echo: hello"),
        ]

        def rows(session: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
            sessions = session.exec(select(SessionRow.id, SessionRow.owner)).all()
            users = session.exec(
                select(MessageRow.session_id, MessageRow.sender_key).where(
                    MessageRow.role == "user"
                )
            ).all()
            return [tuple(r) for r in sessions], [tuple(r) for r in users]

        sessions, users = await store.db.read(rows)
        assert sessions == [(sid, "http:bob")]  # one session made, the sender's
        assert users == [(sid, "http:bob")]  # one message, naming its sender
        assert await Quotas(store.db).sessions_owned({"http:bob"}) == 1
    finally:
        await store.close()
    # The audit trail: the message's line once, before its reply's, whatever the kill cut off
    # (after "committed" it is written from the journal when the task is taken up: alone, or
    # as one of several by the instance the journal says the message reached, this one).
    records = ActionLog(home / "sessions" / sid / "action.log").read()
    said = [(r.kind, r.task_hash) for r in records if r.kind in ("user", "text")]
    task = first[1]["task_hash"]
    assert said == [("user", task), ("text", task)], said


async def test_killed_at_every_step_of_the_intake(tmp_path: Path, backends: Backends) -> None:
    """Each step in a gateway of its own, all at once."""
    stores = [await backends.new() for _ in STEPS]
    OPENING.set(asyncio.Lock())
    outcomes = await asyncio.gather(
        *(killed_at(tmp_path / s, env, s) for s, env in zip(STEPS, stores, strict=True)),
        return_exceptions=True,
    )
    failed = {
        s: repr(outcome)
        for s, outcome in zip(STEPS, outcomes, strict=True)
        if isinstance(outcome, BaseException)
    }
    assert failed == {}
