"""Gateway admins link and part a person's identities over HTTP, as `agenvoy identity` does:
the link holds from the next request (the linked identity reaches the person's private
session), each change is in the log of changes and is rolled back from there, and anyone else
is refused. The console's form does the same (tests/test_authorization_console.py, and below
through its routes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_http import ANN, ROOT, Server, bearer, serving

BOB = bearer("bob")


async def _person(server: Server, identity: str) -> list[str]:
    status, body = await server.call("GET", f"/v1/identities/{identity}", headers=ROOT)
    assert status == 200, body
    linked: list[str] = body["linked"]
    return linked


async def _reads(server: Server, who: dict[str, str], session_id: str) -> int:
    status, _ = await server.call("GET", f"/v1/session/{session_id}/history", headers=who)
    return status


async def _newest_change(server: Server) -> dict[str, Any]:
    status, body = await server.call("GET", "/v1/changes?limit=1", headers=ROOT)
    assert status == 200, body
    newest: dict[str, Any] = body["changes"][0]
    return newest


async def test_an_admin_links_and_parts_identities_and_rolls_a_link_back(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        status, made = await server.call(
            "POST", "/v1/send", json_body={"content": "mine", "persist": True}, headers=ANN
        )
        assert status == 200, made
        private = made["session_id"]
        assert await _reads(server, BOB, private) == 404

        status, body = await server.call(
            "PUT", "/v1/identities/http:bob/person", json_body={"to": "http:ann"}, headers=ROOT
        )
        assert (status, body) == (200, {"identity": "http:bob", "linked": ["http:ann"]})
        assert await _person(server, "http:ann") == ["http:bob"]
        assert await _reads(server, BOB, private) == 200  # one person: her session is his
        change = await _newest_change(server)
        assert (change["kind"], change["changed_by"]) == ("link", "http:root"), change

        status, body = await server.call("POST", f"/v1/changes/{change['id']}/revert", headers=ROOT)
        assert status == 200, body
        assert await _person(server, "http:ann") == []
        assert await _reads(server, BOB, private) == 404

        await server.call(
            "PUT", "/v1/identities/http:bob/person", json_body={"to": "http:ann"}, headers=ROOT
        )
        status, body = await server.call("DELETE", "/v1/identities/http:bob/person", headers=ROOT)
        assert (status, body["linked"]) == (200, [])
        assert await _reads(server, BOB, private) == 404
        status, body = await server.call("DELETE", "/v1/identities/http:bob/person", headers=ROOT)
        assert (status, body["error"]["code"]) == (404, "not_found")


async def test_only_gateway_admins_link_and_bad_identities_are_refused(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        for method, path, body in (
            ("GET", "/v1/identities/http:ann", None),
            ("PUT", "/v1/identities/http:ann/person", {"to": "http:bob"}),
            ("DELETE", "/v1/identities/http:ann/person", None),
        ):
            status, answer = await server.call(method, path, json_body=body, headers=BOB)
            assert (status, answer["error"]["code"]) == (403, "forbidden"), (method, path)
        assert await _person(server, "http:ann") == []  # bob linked himself to nobody
        for path, body in (
            ("/v1/identities/ann/person", {"to": "http:bob"}),
            ("/v1/identities/http:ann/person", {"to": "bob"}),
            ("/v1/identities/http:ann/person", {"to": "http:ann"}),
        ):
            status, answer = await server.call("PUT", path, json_body=body, headers=ROOT)
            assert (status, answer["error"]["code"]) == (400, "bad_request"), (path, body)
