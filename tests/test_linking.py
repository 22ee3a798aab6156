"""Linking one person's identities across front-ends with a one-time code: asked for where the
answer is private (the HTTP API, a private Telegram chat), entered on another front-end, good
once and for ten minutes, and refused where others would read it."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from clock import FakeClock
from fakes.telegram import FakeTelegram
from sqlmodel import select
from telegram_rig import reply_in, sent_to
from telegram_rig import running as telegram_running
from test_http import ANN, BOB, ROOT, USERS, serving, write_tokens
from typer.testing import CliRunner, Result

from adapters.http import start_http
from gateway.access import SessionAccess
from gateway.cli import app as cli_app
from gateway.events import Origin
from gateway.linking import ATTEMPTS, CODE_TTL_MS
from gateway.ownership import Need
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.models import LinkCodeRow
from gateway.store.quotas import Quotas
from gateway.store.sessions import SessionStore

pytestmark = pytest.mark.timeout(60)

CODE = re.compile(r"\b[A-Z2-9]{5}-[A-Z2-9]{5}\b")


@contextlib.asynccontextmanager
async def api(runtime: Runtime) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """The HTTP API of `runtime` on a loopback port."""
    runner = await start_http(runtime, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as client:
            yield client, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def call(
    client: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: dict[str, str],
    body: Any = None,
) -> tuple[int, Any]:
    async with client.request(method, url, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


def access(runtime: Runtime) -> SessionAccess:
    async def closed() -> bool:
        return False

    return SessionAccess(runtime.store.ownership, runtime.authority, open_gateway=closed)


async def live_codes(runtime: Runtime) -> list[LinkCodeRow]:
    return await runtime.store.db.read(lambda s: list(s.exec(select(LinkCodeRow)).all()))


async def test_a_telegram_identity_links_to_a_token_and_its_chat_is_read_over_http(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    write_tokens(home / ".store", USERS)
    ann = Origin("http", sender_id="ann")
    async with (
        FakeTelegram() as fake,
        telegram_running(fake, home) as rig,
        api(rig.runtime) as (client, base),
    ):
        dm, tg_ann = fake.private_chat(11, "Ann"), fake.user(11, "Ann")
        fake.inject_message(dm, tg_ann, "hello from telegram")
        await reply_in(fake, 11, "echo: hello from telegram")
        assert not await access(rig.runtime).may(ann, "tg-11", Need.read)
        status, _ = await call(client, "GET", f"{base}/v1/session/tg-11/history", ANN)
        assert status == 404

        status, issued = await call(client, "POST", f"{base}/v1/me/link-code", ANN)
        assert status == 200, issued
        # Kept hashed: the archive does not hold the code itself.
        assert [r.identity for r in await live_codes(rig.runtime)] == ["http:ann"]
        assert issued["code"].replace("-", "") not in str(await live_codes(rig.runtime))

        fake.inject_message(dm, tg_ann, f"/link {issued['code'].lower()}")
        await reply_in(fake, 11, "linked: telegram:11 with http:ann")

        assert await rig.runtime.store.ownership.linked("http:ann") == {
            "http:ann",
            "telegram:11",
        }
        assert await access(rig.runtime).may(ann, "tg-11", Need.read)
        status, me = await call(client, "GET", f"{base}/v1/me", ANN)
        assert (status, me["identity"], me["linked"]) == (200, "http:ann", ["telegram:11"])
        assert me["gateway_admin"] is False
        status, history = await call(client, "GET", f"{base}/v1/session/tg-11/history", ANN)
        assert status == 200, history
        texts = [m["content"] for m in history["messages"]]
        assert "hello from telegram" in texts
        # Used once: entered again, it is refused.
        fake.inject_message(dm, tg_ann, f"/link {issued['code']}")
        await reply_in(fake, 11, "wrong, used or expired")

        # Another token does not gain anything by the link.
        assert not await access(rig.runtime).may(
            Origin("http", sender_id="bob"), "tg-11", Need.read
        )
        # /unlink in the chat takes the Telegram identity out again.
        fake.inject_message(dm, tg_ann, "/unlink")
        await reply_in(fake, 11, "linked with nobody now")
        assert not await access(rig.runtime).may(ann, "tg-11", Need.read)


async def test_a_code_is_not_issued_in_a_telegram_group(tmp_path: Path) -> None:
    async with FakeTelegram() as fake, telegram_running(fake, tmp_path / "home") as rig:
        group, mallory = fake.group(-100, "team"), fake.user(66, "Mallory")
        fake.inject_message(group, mallory, f"/link@{fake.bot_user['username']}")
        await reply_in(fake, -100, "ask for a link code in a private chat with the bot")
        assert await live_codes(rig.runtime) == []
        # Privately, the same member gets one.
        fake.inject_message(fake.private_chat(66, "Mallory"), mallory, "/link")
        await reply_in(fake, 66, "link code ")
        assert [r.identity for r in await live_codes(rig.runtime)] == ["telegram:66"]
        assert not any(CODE.search(text) for text in sent_to(fake, -100))


async def test_expired_wrong_and_guessed_codes_are_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    async with serving(tmp_path, clock) as server:
        status, issued = await server.call("POST", "/v1/me/link-code", headers=ANN)
        assert status == 200
        await clock.advance(CODE_TTL_MS / 1000 + 1)
        status, refused = await server.call(
            "POST", "/v1/me/link", json_body={"code": issued["code"]}, headers=BOB
        )
        assert (status, refused["error"]["code"]) == (400, "bad_link_code")
        assert await server.runtime.store.ownership.linked("http:bob") == {"http:bob"}

        status, issued = await server.call("POST", "/v1/me/link-code", headers=ANN)
        # The expired code was one wrong attempt already.
        for _ in range(ATTEMPTS - 1):
            status, refused = await server.call(
                "POST", "/v1/me/link", json_body={"code": "AAAAA-AAAAA"}, headers=BOB
            )
            assert status == 400, refused
        # Past the attempts, even the right code is refused for a while.
        status, refused = await server.call(
            "POST", "/v1/me/link", json_body={"code": issued["code"]}, headers=BOB
        )
        assert (status, refused["error"]["code"]) == (429, "too_many_requests")
        await clock.advance(CODE_TTL_MS / 1000 / 2)
        status, issued = await server.call("POST", "/v1/me/link-code", headers=ANN)
        await clock.advance(CODE_TTL_MS / 1000 / 2 + 1)
        status, me = await server.call(
            "POST", "/v1/me/link", json_body={"code": issued["code"]}, headers=BOB
        )
        assert (status, me["linked"]) == (200, ["http:ann"])

        status, _ = await server.call(
            "POST", "/v1/me/link", json_body={"code": "not a code"}, headers=BOB
        )
        assert status == 400
        status, me = await server.call("DELETE", "/v1/me/link", headers=BOB)
        assert (status, me["linked"]) == (200, [])


async def test_a_person_holds_few_live_codes_and_anonymous_none(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        codes = []
        for _ in range(5):
            status, issued = await server.call("POST", "/v1/me/link-code", headers=ANN)
            codes.append(issued["code"])
        rows = await live_codes(server.runtime)
        assert len(rows) == 3
        # The oldest went: it links nobody now.
        status, _ = await server.call(
            "POST", "/v1/me/link", json_body={"code": codes[0]}, headers=BOB
        )
        assert status == 400
        status, me = await server.call("GET", "/v1/me", headers=ROOT)
        assert (me["identity"], me["gateway_admin"]) == ("http:root", True)
    async with serving(tmp_path / "open", users=None) as server:
        status, refused = await server.call("POST", "/v1/me/link-code")
        assert (status, refused["error"]["code"]) == (403, "not_allowed")


async def test_the_operator_links_parts_and_shows_identities(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("AGENVOY_HOME", str(home))

    def agenvoy(*args: str) -> Result:
        return CliRunner().invoke(cli_app, list(args))

    linked = await asyncio.to_thread(agenvoy, "identity", "link", "telegram:42", "http:ann")
    assert (linked.exit_code, linked.output) == (0, "linked: telegram:42 with http:ann\n")
    shown = await asyncio.to_thread(agenvoy, "identity", "show", "http:ann")
    assert shown.output == "http:ann: linked with telegram:42\n"
    runtime = await Runtime.start(Settings(home=home, _env_file=None))
    try:
        assert await runtime.store.ownership.linked("telegram:42") == {"telegram:42", "http:ann"}
    finally:
        await runtime.close()
    parted = await asyncio.to_thread(agenvoy, "identity", "unlink", "telegram:42")
    assert parted.exit_code == 0, parted.output
    shown = await asyncio.to_thread(agenvoy, "identity", "show", "http:ann")
    assert shown.output == "http:ann: linked with none\n"
    again = await asyncio.to_thread(agenvoy, "identity", "unlink", "telegram:42")
    assert again.exit_code == 1
    bad = await asyncio.to_thread(agenvoy, "identity", "show", "ann")
    assert bad.exit_code == 2


async def test_wrong_codes_are_counted_once_over_every_instance(
    tmp_path: Path, clock: FakeClock, database_url: str
) -> None:
    """Two gateways on one archive: the guesses one identity makes on either count together,
    and guesses sent at once are each counted."""
    async with (
        serving(tmp_path / "a", clock, database_url=database_url) as one,
        serving(tmp_path / "b", clock, database_url=database_url) as two,
    ):
        status, issued = await one.call("POST", "/v1/me/link-code", headers=ANN)
        assert status == 200, issued
        for n in range(ATTEMPTS):
            server = (one, two)[n % 2]
            status, refused = await server.call(
                "POST", "/v1/me/link", json_body={"code": "AAAAA-AAAAA"}, headers=BOB
            )
            assert status == 400, refused
        for server in (one, two):
            status, refused = await server.call(
                "POST", "/v1/me/link", json_body={"code": issued["code"]}, headers=BOB
            )
            assert (status, refused["error"]["code"]) == (429, "too_many_requests")
        assert await one.runtime.store.ownership.linked("http:bob") == {"http:bob"}

        # Guesses sent all at once to both instances: no more than the limit are tried.
        await clock.advance(CODE_TTL_MS / 1000 + 1)

        async def guess(n: int) -> int:
            server = (one, two)[n % 2]
            status, _ = await server.call(
                "POST", "/v1/me/link", json_body={"code": "BBBBB-BBBBB"}, headers=ROOT
            )
            return status

        statuses = await asyncio.gather(*(guess(n) for n in range(4 * ATTEMPTS)))
        assert sorted(statuses) == [400] * ATTEMPTS + [429] * (3 * ATTEMPTS)


async def test_one_read_finds_the_caller_s_person_their_quotas_and_the_session(
    store: SessionStore,
) -> None:
    """What every request on a session asks first, on both backends: the caller's identities
    across links with the quota overrides each has, and the session's owner and shares, or a
    shared chat's membership."""
    own = store.ownership
    await own.link("http:bob", "http:ann")
    await Quotas(store.db).set("http:ann", {"messages_per_minute": 3})
    await store.ensure("cli-ann", owner="http:ann")
    read = await own.caller_facts("http:bob", "cli-ann")
    assert read.identities == {"http:ann", "http:bob"}
    assert read.quotas == {"http:ann": '{"messages_per_minute": 3}'}
    assert read.facts is not None and read.facts.owner == "http:ann"
    assert (await own.caller_facts("http:zed", "cli-ann")).quotas == {}
    assert (await own.caller_facts("http:zed", "cli-none")).facts is None
    # A shared chat: a member is whoever of the person has written there.
    await store.take_in("tg-5", "hello", sender="Bob", sender_key="http:bob")
    chat = await own.caller_facts("http:ann", "tg-5")
    assert chat.facts is not None and chat.facts.member
    assert chat.quotas == {"http:ann": '{"messages_per_minute": 3}'}
    stranger = await own.caller_facts("http:zed", "tg-5")
    assert stranger.facts is not None and not stranger.facts.member
