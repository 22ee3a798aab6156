"""The HTTP API against hostile callers: identities come from credentials only, browsers from
elsewhere are refused, every route follows one authorization rule, and what the HTTP parser
cannot read or what arrives too slowly ends cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import re
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support import wait_until
from test_http import ROOT, Server, bearer, err, member_of, serving, terminal
from typer.testing import CliRunner, Result

from adapters.http.routes import ROUTES
from adapters.http_client import GatewayClient, GatewayError
from gateway.auth import Access
from gateway.cli import app as cli_app
from gateway.credentials import TERMINAL_FILE

SECURITY_PAGE = Path(__file__).parents[1] / "docs" / "security.md"


@pytest.fixture
async def anonymous(tmp_path: Path) -> AsyncIterator[Server]:
    """The default gateway: no token configured or issued."""
    async with serving(tmp_path, users=None, admins="terminal:alice") as srv:
        yield srv


async def test_issued_tokens_name_their_holder_and_can_be_revoked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("AGENVOY_HOME", str(home))
    runner = CliRunner()

    async def cli(*args: str) -> Result:
        return await asyncio.to_thread(runner.invoke, cli_app, list(args))

    added = await cli("token", "add", "carol", "--display", "Carol C")
    assert added.exit_code == 0, added.output
    token = added.output.strip()
    assert token.startswith("agv_")
    # Only its hash is kept, in the archive; nothing in the home holds the token.
    for path in home.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    logged = await cli("changes", "list", "--kind", "token")
    assert "token carol: (none) → " in logged.output and "terminal:" in logged.output
    for refused_name in ("carol", "api", "../x"):
        assert (await cli("token", "add", refused_name)).exit_code == 2, refused_name
    listed = await cli("token", "list")
    assert "http:carol  Carol C" in listed.output and "agv_" not in listed.output

    async with serving(tmp_path, users=None) as srv:
        mode = stat.S_IMODE((srv.runtime.settings.store_dir / TERMINAL_FILE).stat().st_mode)
        assert mode == 0o600
        carol = {"Authorization": f"Bearer {token}"}
        status, body = await srv.call(
            "POST", "/v1/send", json_body={"content": "hi"}, headers=carol
        )
        assert status == 200 and body["events"][0]["sender"] == "Carol C"
        # An issued token makes a token required.
        async with srv.client.get(srv.url("/v1/sessions")) as resp:
            assert resp.status == 401
        removed = await cli("token", "remove", "carol")
        assert removed.exit_code == 0
        assert (await cli("token", "list")).output == "no tokens issued\n"

        async def refused() -> bool:
            return (await srv.call("GET", "/v1/sessions", headers=carol))[0] == 403

        assert await wait_until(refused, within=5)
    assert (await cli("token", "remove", "carol")).exit_code == 1


async def test_headers_make_nobody_a_terminal_window_or_an_admin(anonymous: Server) -> None:
    srv = anonymous
    posing = {"X-Agenvoy-Sender": "alice", "X-Agenvoy-Client": "terminal", "X-Agenvoy-Window": "w1"}
    status, body = await srv.call(
        "POST", "/v1/send", json_body={"content": "!confirm x", "persist": True}, headers=posing
    )
    assert status == 202
    origin = body["pending"]["origin"]
    assert (origin["platform"], origin["sender_id"]) == ("http", "anonymous")
    own = body["task_hash"]

    # AGENVOY_ADMINS names terminal:alice: only the local credential can be her.
    alice = terminal(srv, "alice", "w1")
    status, body = await srv.call(
        "POST", "/v1/send", json_body={"content": "!confirm y", "persist": True}, headers=alice
    )
    assert status == 202 and body["pending"]["origin"]["window_hash"] == "w1"
    sid, window_task = body["session_id"], body["task_hash"]
    status, body = await srv.call("GET", "/v1/pending", headers=posing)
    assert [p["task_hash"] for p in body["pending"]] == [own]
    status, body = await srv.call("GET", "/v1/pending", headers=alice)
    assert {p["task_hash"] for p in body["pending"]} == {own, window_task}

    # The window's hash, which its prompt list shows it, answers nothing for anyone else; a
    # caller who may not answer does not even see the prompt.
    status, body = await srv.call("GET", f"/v1/session/{sid}/pending", headers=alice)
    assert body["pending"][0]["origin"]["window_hash"] == "w1"
    status, body = await srv.call("GET", f"/v1/session/{sid}/pending", headers=posing)
    assert body["pending"] == []
    answer = f"/v1/session/{sid}/pending/{window_task}"
    status, body = await srv.call("POST", answer, json_body={"approve": True}, headers=posing)
    assert (status, err(body)) == (403, "not_allowed")
    status, body = await srv.call("POST", answer, json_body={"approve": True}, headers=alice)
    assert status == 200


async def test_anonymous_is_never_an_admin_of_shared_chats(tmp_path: Path) -> None:
    async with serving(tmp_path, users=None) as srv:
        await srv.runtime.store.ensure("tg-5")
        status, body = await srv.call("DELETE", "/v1/session/tg-5")
        assert (status, err(body)) == (403, "not_allowed")
        assert await srv.runtime.store.get("tg-5") is not None


async def test_deleting_a_shared_chat_is_for_admins(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        for sid in ("dc-42", "tg--100"):
            await srv.runtime.store.ensure(sid)
            await member_of(srv, sid, "tester")
            status, body = await srv.call("DELETE", f"/v1/session/{sid}")
            assert (status, err(body)) == (403, "not_allowed")
            assert body["error"]["message"] == "only an admin of this chat may manage it"
            assert await srv.runtime.store.get(sid) is not None
            assert (await srv.call("DELETE", f"/v1/session/{sid}", headers=ROOT))[0] == 200
        private = (await srv.call("POST", "/v1/session"))[1]["session_id"]
        assert (await srv.call("DELETE", f"/v1/session/{private}"))[0] == 200


async def test_foreign_hosts_and_origins_are_refused(tmp_path: Path) -> None:
    async with serving(
        tmp_path, http_allowed_hosts="agenvoy.internal", http_allowed_origins="https://ops.example"
    ) as srv:
        for host in ("127.0.0.1:1", "localhost", "[::1]:8080", "agenvoy.internal:443"):
            status, _ = await srv.call("GET", "/v1/sessions", headers={"Host": host})
            assert status == 200, host
        for host in ("evil.example", "evil.example:17989", "127.0.0.1.evil.example"):
            status, body = await srv.call("GET", "/v1/sessions", headers={"Host": host})
            assert (status, err(body)) == (421, "wrong_host"), host
        status, body = await srv.call("GET", "/healthz", headers={"Host": "evil.example"})
        assert status == 421

        page = {"Origin": "https://evil.example"}
        status, body = await srv.call("POST", "/v1/session", headers=page)
        assert (status, err(body)) == (403, "cross_origin")
        status, body = await srv.call("GET", "/v1/sessions", headers={"Origin": "null"})
        assert status == 403
        ops = {"Origin": "https://ops.example"}
        async with srv.client.get(srv.url("/v1/sessions"), headers=ops) as resp:
            assert resp.status == 200
            assert resp.headers["Access-Control-Allow-Origin"] == "https://ops.example"
        preflight = {**ops, "Access-Control-Request-Method": "POST"}
        async with srv.client.options(srv.url("/v1/send"), headers=preflight) as resp:
            assert resp.status == 204
            assert "Authorization" in resp.headers["Access-Control-Allow-Headers"]

        # A form can post text/plain without a preflight; JSON in it is still refused.
        form = {"Content-Type": "text/plain"}
        status, body = await srv.call("POST", "/v1/send", data=b'{"content": "hi"}', headers=form)
        assert (status, err(body)) == (415, "unsupported_media_type")
        status, body = await srv.call(
            "PUT", "/v1/session/cli-x", data=b"name=x", headers={"Content-Type": "x-www-form"}
        )
        assert status == 415
        assert await srv.runtime.store.list_sessions() == []


async def _raw(srv: Server, data: bytes, *, read_within: float = 5.0) -> bytes:
    host, port = srv.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(read_within):
            return await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_unreadable_requests_get_the_json_error(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    long_path = b"GET /v1/session/cli-" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n"
    long_header = b"GET /v1/sessions HTTP/1.1\r\nHost: localhost\r\nX-A: " + b"b" * 20_000
    for request in (long_path, long_header + b"\r\n\r\n", b"\x16\x03\x01garbage\r\n\r\n"):
        answer = await _raw(server, request)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert re.match(rb"HTTP/1\.[01] 400 ", head), answer[:200]
        assert b"Content-Type: application/json" in head
        assert re.fullmatch(rb'\{"error":\{"code":"bad_request","message":"[^"]+"\}\}', body)
    assert "Traceback" not in caplog.text


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path) as srv:
        yield srv


@pytest.fixture
async def slow(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(
        tmp_path, http_idle_timeout_seconds=0.5, http_body_timeout_seconds=0.5
    ) as srv:
        yield srv


async def test_idle_and_slow_connections_are_closed(slow: Server) -> None:
    loop = asyncio.get_running_loop()
    auth = f"Authorization: {bearer('tester')['Authorization']}\r\n".encode()
    for started in (
        b"",  # idle
        b"GET /v1/sessions HTTP/1.1\r\nHost: local",  # headers never finished
        b"POST /v1/session HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + auth
        + b"Content-Length: 100\r\n\r\n{",  # body never finished
    ):
        begun = loop.time()
        await _raw(slow, started, read_within=5.0)  # returns once the server hangs up
        assert loop.time() - begun < 4, started
    assert await slow.runtime.store.list_sessions() == []


async def test_client_encodes_path_segments(server: Server) -> None:
    sid = (await server.call("POST", "/v1/session"))[1]["session_id"]
    token = bearer("tester")["Authorization"].removeprefix("Bearer ")
    async with GatewayClient(server.base, token) as client:
        for task in ("../../x", "..", "a/b", "x?approve=1"):
            with pytest.raises(GatewayError) as caught:
                await client.answer(sid, task, approve=True)
            # Answered by the prompt route about that very task, not by another route.
            assert caught.value.status in (400, 404), task
            assert caught.value.code in ("not_found", "bad_request"), task


def test_the_security_page_lists_the_rule_of_every_route() -> None:
    text = SECURITY_PAGE.read_text()
    section = text.split("## Authorization per route", 1)[1].split("\n## ", 1)[0]
    rows = {
        tuple(cell.strip("` ") for cell in line.strip("|").split("|")[:4])
        for line in section.splitlines()
        if line.startswith("| `")
    }
    wanted = {
        (route.method, route.path, route.need.value if route.need else "—", route.access.value)
        for route in ROUTES
    }
    assert wanted <= rows, wanted - rows
    assert {r.access for r in ROUTES} >= {Access.anyone, Access.requester, Access.shared_admin}


async def test_a_token_issued_is_enforced_on_the_very_next_anonymous_request(
    anonymous: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No token was needed; `agenvoy token add` makes one needed at once, not at the first
    request that happens to carry a token."""
    srv = anonymous
    monkeypatch.setenv("AGENVOY_HOME", str(srv.runtime.settings.home))
    async with srv.client.get(srv.url("/v1/sessions")) as resp:
        assert resp.status == 200  # open to anonymous callers on loopback
    added = await asyncio.to_thread(CliRunner().invoke, cli_app, ["token", "add", "bob"])
    assert added.exit_code == 0, added.output
    async with srv.client.get(srv.url("/v1/sessions")) as resp:
        assert resp.status == 401
    async with srv.client.post(srv.url("/v1/send"), json={"content": "hi"}) as resp:
        assert resp.status == 401
    bob = {"Authorization": f"Bearer {added.output.strip()}"}
    assert (await srv.call("GET", "/v1/sessions", headers=bob))[0] == 200
