"""Quotas and budgets through the real front-ends: a Telegram member's daily token budget (the
fake Bot API, the openai agent on the fake model, an injected clock), sessions owned and
messages a minute over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from clock import FakeClock
from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text
from fakes.telegram import FakeTelegram
from telegram_rig import reply_in, running, sent_to
from test_http import bearer, serving
from typer.testing import CliRunner

from gateway.cli import app as cli_app
from gateway.clock import SYSTEM_CLOCK
from gateway.events import Origin
from gateway.quotas import Admission, day_start, next_month
from gateway.settings import Settings
from gateway.store.db import Database
from gateway.store.lean import Lean
from gateway.store.sessions import SessionStore
from gateway.store.usage import UsageRecord, month_start

DAY_S = 86_400
T = TypeVar("T")


async def test_a_member_s_daily_budget_stops_them_until_the_next_day(
    tmp_path: Path, telegram: FakeTelegram, model: FakeOpenAI, clock: FakeClock
) -> None:
    options = model.agent_settings()
    async with running(
        telegram,
        tmp_path / "home",
        clock=clock,
        quota_tokens_day=200,
        admins="telegram:49",
        **options,
    ):
        model.script(
            Text("first answer", usage={"prompt_tokens": 150, "completion_tokens": 60}),
            Text("bob's answer", usage={"prompt_tokens": 10, "completion_tokens": 5}),
            Text("next day answer", usage={"prompt_tokens": 10, "completion_tokens": 5}),
        )
        ann, bob = telegram.user(41, "Ann"), telegram.user(42, "Bob")
        group = telegram.group(-500, "club")
        bot = f"@{telegram.bot_user['username']}"
        telegram.inject_message(group, ann, f"{bot} first question")
        await reply_in(telegram, -500, "first answer")
        telegram.inject_message(group, ann, f"{bot} second question")
        told = await reply_in(telegram, -500, "daily budget")
        assert "daily budget of 200 tokens used; resets 00:00 UTC" in told["text"]
        assert len(model.requests) == 1  # the refused message reached no model
        # Another member of the chat has a budget of their own.
        telegram.inject_message(group, bob, f"{bot} my question")
        await reply_in(telegram, -500, "bob's answer")
        # Ann sees where she stands; the chat's admin sees each member; Ann may not.
        telegram.inject_message(group, ann, "/usage me")
        mine = await reply_in(telegram, -500, "tokens today")
        assert "tokens today: 210 of 200 (resets 00:00 UTC)" in mine["text"]
        telegram.inject_message(group, ann, "/usage")
        await reply_in(telegram, -500, "only admins see each member's usage")
        telegram.inject_message(group, telegram.user(49, "Dee"), "/usage")
        listing = (await reply_in(telegram, -500, "this chat today"))["text"]
        assert "telegram:41: 210 today, 210 this month in 1 calls" in listing
        assert "telegram:42: 15 today" in listing
        # The next UTC day, Ann goes on.
        now = clock.now_ms()
        await clock.advance((day_start(now) + DAY_S * 1000 - now) / 1000 + 1)
        telegram.inject_message(group, ann, f"{bot} third question")
        await reply_in(telegram, -500, "next day answer")
        assert sum("daily budget" in t for t in sent_to(telegram, -500)) == 1


async def test_sessions_past_the_quota_are_refused_over_http(tmp_path: Path) -> None:
    async with serving(tmp_path, quota_sessions=2) as server:
        for _ in range(2):
            status, _body = await server.call("POST", "/v1/session", json_body={"prefix": "cli"})
            assert status == 201
        async with server.client.post(server.url("/v1/session"), json={"prefix": "chat"}) as resp:
            assert resp.status == 429
            body = await resp.json()
            assert "Retry-After" not in resp.headers
        assert body["error"]["code"] == "session_quota"
        assert body["error"]["message"] == "limit of 2 sessions reached; delete one to make another"
        # A send that would make a new chat-* session is refused the same way; temp-* are not
        # counted, and another token has sessions of its own.
        status, body = await server.call(
            "POST", "/v1/send", json_body={"content": "keep", "persist": True}
        )
        assert (status, body["error"]["code"]) == (429, "session_quota")
        status, _body = await server.call("POST", "/v1/send", json_body={"content": "hi"})
        assert status == 200
        status, _body = await server.call(
            "POST", "/v1/session", json_body={"prefix": "cli"}, headers=bearer("ann")
        )
        assert status == 201
        # Gateway admins are exempt.
        for _ in range(3):
            status, _body = await server.call(
                "POST", "/v1/session", json_body={"prefix": "cli"}, headers=bearer("root")
            )
            assert status == 201


@pytest.mark.parametrize("limit", [0, 5])
async def test_only_a_sessions_limit_asks_whether_a_message_makes_its_session(
    store: SessionStore, settings: Settings, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    limited = settings.model_copy(update={"quota_sessions": limit})
    admission = Admission(limited, store, frozenset(), SYSTEM_CLOCK, lambda _key: 0)
    asked: list[str] = []
    exists = store.exists

    async def counted(session_id: str) -> bool:
        asked.append(session_id)
        return await exists(session_id)

    monkeypatch.setattr(store, "exists", counted)
    ann = Origin("http", sender_id="ann")
    await admission.admit(ann, "chat-new")  # a message that would make its session
    await store.ensure("chat-new")
    await admission.admit(ann, "chat-new")
    assert asked == (["chat-new", "chat-new"] if limit else [])


async def test_messages_a_minute_are_limited_and_freed_as_the_minute_passes(
    tmp_path: Path, clock: FakeClock
) -> None:
    async with serving(tmp_path, clock, quota_messages_per_minute=2) as server:
        for n in range(2):
            status, _body = await server.call(
                "POST", "/v1/send", json_body={"content": f"m{n}", "wait": 0}
            )
            assert status == 202 or status == 200
        await clock.advance(20)
        async with server.client.post(
            server.url("/v1/send"), json={"content": "m3", "wait": 0}
        ) as resp:
            assert resp.status == 429
            body = await resp.json()
            assert resp.headers["Retry-After"] == "40"
        assert body["error"]["code"] == "rate_limited"
        assert "sent 2 messages in the last minute" in body["error"]["message"]
        assert "try again in 40 s" in body["error"]["message"]
        # Another identity is counted apart.
        status, _body = await server.call(
            "POST", "/v1/send", json_body={"content": "a1", "wait": 0}, headers=bearer("ann")
        )
        assert status in (200, 202)
        await clock.advance(40)
        status, _body = await server.call(
            "POST", "/v1/send", json_body={"content": "m4", "wait": 0}
        )
        assert status in (200, 202)


def test_the_month_starts_on_the_first_and_the_next_one_follows() -> None:
    at = 1_780_000_000_000  # 2026-05-28
    assert month_start(at) == 1_777_593_600_000  # 2026-05-01 00:00 UTC
    assert next_month(at) == 1_780_272_000_000  # 2026-06-01 00:00 UTC
    assert next_month(1_796_083_200_000) == 1_798_761_600_000  # December → January


async def test_usage_per_identity_over_http_shows_others_only_to_admins(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        usage = server.runtime.store.usage
        await usage.record(UsageRecord("cli-a", "m", input=5, output=2, identity="http:tester"))
        await usage.record(UsageRecord("cli-b", "m", input=50, output=20, identity="http:ann"))
        status, body = await server.call("GET", "/v1/usage?by=identity")
        assert status == 200
        assert body["identities"] == [
            {"identity": "http:tester", "calls": 1, "input": 5, "output": 2, "cost": None}
        ]
        status, body = await server.call("GET", "/v1/usage?by=identity", headers=bearer("root"))
        assert [u["identity"] for u in body["identities"]] == ["http:ann", "http:tester"]
        status, body = await server.call("GET", "/v1/usage?by=member")
        assert status == 400


async def test_the_operator_sets_a_quota_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENVOY_HOME", str(tmp_path / "home"))
    runner = CliRunner()

    async def cli(*args: str) -> tuple[int, str]:
        result = await asyncio.to_thread(runner.invoke, cli_app, list(args))
        return result.exit_code, result.output

    assert await cli("quota", "set", "http:tester", "sessions=1", "tokens_day=9") == (
        0,
        "http:tester: sessions=1 tokens_day=9\n",
    )
    assert (await cli("quota", "set", "http:tester", "bogus=1"))[0] == 2
    assert (await cli("quota", "set", "tg-5", "sessions=1"))[0] == 2  # not a chat's limit
    assert (await cli("quota", "set", "nobody", "sessions=1"))[0] == 2
    assert await cli("quota", "set", "http:tester", "tokens_day=default") == (
        0,
        "http:tester: sessions=1\n",
    )
    code, out = await cli("quota", "show")
    assert code == 0 and "http:tester: sessions=1" in out
    async with serving(tmp_path) as server:
        assert (await server.call("POST", "/v1/session", json_body={"prefix": "cli"}))[0] == 201
        status, body = await server.call("POST", "/v1/session", json_body={"prefix": "cli"})
        assert (status, body["error"]["code"]) == (429, "session_quota")
        await server.runtime.store.usage.record(
            UsageRecord("cli-x", "m", input=3, output=4, identity="http:tester")
        )
    code, out = await cli("usage", "--by", "identity")
    assert code == 0 and "http:tester" in out and "3" in out


async def test_linked_identities_count_together_for_tasks_waiting(
    tmp_path: Path, clock: FakeClock
) -> None:
    async with serving(tmp_path, clock, max_pending_per_sender=2) as server:
        await server.runtime.store.ownership.link("http:bob", "http:ann")

        async def send(who: str) -> tuple[int, str]:
            status, body = await server.call(
                "POST",
                "/v1/send",
                json_body={"content": "!sleep 600", "wait": 0},
                headers=bearer(who),
            )
            return status, body["error"]["code"] if status >= 400 else ""

        assert await send("ann") == (202, "")
        assert await send("bob") == (202, "")
        assert await send("bob") == (429, "too_many_requests")
        assert await send("ann") == (429, "too_many_requests")
        assert await send("tester") == (202, "")  # a person of their own


async def test_a_chat_s_messages_a_minute_hold_for_all_its_members(
    tmp_path: Path, telegram: FakeTelegram, clock: FakeClock
) -> None:
    async with running(telegram, tmp_path / "home", clock=clock, chat_quota_messages_per_minute=1):
        ann, bob = telegram.user(41, "Ann"), telegram.user(42, "Bob")
        group = telegram.group(-600, "busy")
        bot = f"@{telegram.bot_user['username']}"
        telegram.inject_message(group, ann, f"{bot} one")
        await reply_in(telegram, -600, "echo:")
        telegram.inject_message(group, bob, f"{bot} two")
        told = await reply_in(telegram, -600, "in the last minute")
        assert "this chat has sent 1 message in the last minute" in told["text"]
        # Bob alone, in a private chat, is not held by the group's limit.
        telegram.inject_message(telegram.private_chat(42, "Bob"), bob, "three")
        await reply_in(telegram, 42, "echo: three")
        await clock.advance(60)
        telegram.inject_message(group, bob, f"{bot} four")
        await reply_in(telegram, -600, "four")


async def test_a_message_to_a_session_takes_its_sender_s_quotas_from_the_access_check(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The access check reads the sender's person with their quota overrides; the admission
    then holds the message to them without asking the archive again (a round trip per message
    on PostgreSQL), linked identities' overrides included."""
    async with serving(tmp_path, clock) as server:
        store = server.runtime.store
        await store.ownership.link("http:tester", "http:ann")
        admission = server.runtime.engine.admission
        await admission.quotas.set("http:ann", {"messages_per_minute": 1})
        status, made = await server.call("POST", "/v1/session", json_body={"prefix": "cli"})
        assert status == 201
        reads = _CountedReads(admission.quotas._db)
        monkeypatch.setattr(admission.quotas, "_db", reads)
        sid = made["session_id"]
        first = await server.call("POST", "/v1/send", json_body={"content": "a", "session_id": sid})
        assert first[0] == 200, first
        status, body = await server.call(
            "POST", "/v1/send", json_body={"content": "b", "session_id": sid}
        )
        assert (status, body["error"]["code"]) == (429, "rate_limited")
        assert reads.count == 0
        # Without a session id there is no access check: the admission reads for itself.
        status, body = await server.call("POST", "/v1/send", json_body={"content": "c"})
        assert (status, body["error"]["code"]) == (429, "rate_limited")
        assert reads.count == 1


class _CountedReads:
    """A database whose lean reads are counted."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.count = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    async def read_lean(self, work: Callable[[Lean], T]) -> T:
        self.count += 1
        return await self._db.read_lean(work)
