"""Agent profiles over HTTP: gateway admins only; a change is a version, a refused one names
its field and never repeats a key; an identity binding picks the profile that answers that
token's tasks (`/agent` says so)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from test_http import ANN, ROOT, Server, serving

KEY_LIKE = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path) as srv:
        yield srv


async def test_only_gateway_admins_manage_profiles(server: Server) -> None:
    for method, path in [
        ("GET", "/v1/profiles"),
        ("GET", "/v1/profiles/default"),
        ("PUT", "/v1/profiles/team"),
        ("GET", "/v1/bindings"),
        ("DELETE", "/v1/bindings?target=prefix:cli"),
    ]:
        status, body = await server.call(method, path, json_body={}, headers=ANN)
        assert status == 403, (method, path, body)


async def test_a_profile_is_versioned_and_bound_to_an_identity(server: Server) -> None:
    status, body = await server.call("GET", "/v1/profiles", headers=ROOT)
    assert status == 200 and [p["name"] for p in body["profiles"]] == ["default"]
    assert body["profiles"][0]["fields"]["agent"] == "offline"

    status, body = await server.call(
        "PUT", "/v1/profiles/team", json_body={"key": KEY_LIKE}, headers=ROOT
    )
    assert status == 400 and body["error"]["message"].startswith("key: this looks like a key")
    assert "abcdefghijklmnop" not in str(body)
    status, body = await server.call(
        "PUT", "/v1/profiles/team", json_body={"fallbacks": ["nobody"]}, headers=ROOT
    )
    assert status == 400 and body["error"]["message"] == "fallbacks: no profile 'nobody'"

    made = {"agent": "offline", "persona": "Team helper", "key": "env:TEAM_KEY"}
    status, body = await server.call("PUT", "/v1/profiles/team", json_body=made, headers=ROOT)
    assert status == 200 and body["version"] == 1 and body["fields"]["key"] == "env:TEAM_KEY"
    status, body = await server.call(
        "PUT", "/v1/profiles/team", json_body={"history_window": 8}, headers=ROOT
    )
    assert status == 200 and body["version"] == 2

    bound = {"target": "identity:http:ann", "profile": "team"}
    status, body = await server.call("PUT", "/v1/bindings", json_body=bound, headers=ROOT)
    assert status == 200 and body["bound_by"] == "http:root"
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "/agent"}, headers=ANN
    )
    assert "profile: team (version 2)" in body["text"]
    assert "bound to identity:http:ann" in body["text"]

    status, body = await server.call(
        "POST", "/v1/profiles/team/rollback", json_body={"version": 1}, headers=ROOT
    )
    assert status == 200 and body["version"] == 3 and body["fields"]["history_window"] is None
    status, body = await server.call("GET", "/v1/profiles/team/history", headers=ROOT)
    assert [v["change"] for v in body["versions"]] == [
        "created",
        "history_window: null → 8",
        "rollback to version 1: history_window: 8 → null",
    ]
    assert {v["changed_by"] for v in body["versions"]} == {"http:root"}

    status, body = await server.call(
        "DELETE", "/v1/bindings?target=identity:http:ann", headers=ROOT
    )
    assert status == 200
    status, body = await server.call(
        "DELETE", "/v1/bindings?target=identity:http:ann", headers=ROOT
    )
    assert status == 404
    status, body = await server.call("GET", "/v1/profiles/nobody", headers=ROOT)
    assert status == 404
    status, body = await server.call("GET", "/v1/profiles/Bad%20Name", headers=ROOT)
    assert status == 400 and body["error"]["message"].startswith("name: ")
