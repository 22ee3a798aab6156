"""Agent profiles over HTTP: gateway admins only; a change is a version, a refused one names
its field and never repeats a key; an identity binding picks the profile that answers that
token's tasks (`/agent` says so)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text, ToolCalls
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


async def test_a_profile_is_deleted_only_when_nothing_names_it_and_comes_back_by_rollback(
    server: Server,
) -> None:
    async def call(method: str, path: str, body: object = None) -> tuple[int, Any]:
        status, said = await server.call(method, path, json_body=body, headers=ROOT)
        return status, said

    assert (await call("PUT", "/v1/profiles/team", {"persona": "Team"}))[0] == 200
    assert (await call("PUT", "/v1/profiles/helper", {"fallbacks": ["team"]}))[0] == 200
    bound = {"target": "identity:http:ann", "profile": "team"}
    assert (await call("PUT", "/v1/bindings", bound))[0] == 200

    status, _ = await server.call("DELETE", "/v1/profiles/team", headers=ANN)
    assert status == 403
    status, body = await call("DELETE", "/v1/profiles/default")
    assert status == 400 and "stays" in body["error"]["message"]
    status, body = await call("DELETE", "/v1/profiles/team")
    assert status == 400 and "bound at identity:http:ann" in body["error"]["message"]
    assert (await call("DELETE", "/v1/bindings?target=identity:http:ann"))[0] == 200
    status, body = await call("DELETE", "/v1/profiles/team")
    assert status == 400 and "fallback of helper" in body["error"]["message"]
    assert (await call("PUT", "/v1/profiles/helper", {"fallbacks": []}))[0] == 200

    status, body = await call("DELETE", "/v1/profiles/team")
    assert status == 200 and body == {"name": "team", "version": 2, "deleted": True}
    status, body = await call("GET", "/v1/profiles")
    assert [p["name"] for p in body["profiles"]] == ["default", "helper"]
    assert (await call("GET", "/v1/profiles/team"))[0] == 404
    assert (await call("DELETE", "/v1/profiles/team"))[0] == 404
    status, body = await call("PUT", "/v1/bindings", bound)
    assert status == 400 and "no profile 'team'" in body["error"]["message"]
    status, body = await call("GET", "/v1/profiles/team/history")
    assert [v["change"] for v in body["versions"]] == ["created", "deleted"]

    status, body = await call("POST", "/v1/profiles/team/rollback", {"version": 1})
    assert status == 200 and body["version"] == 3 and body["fields"]["persona"] == "Team"
    status, body = await call("GET", "/v1/profiles/team")
    assert status == 200 and body["version"] == 3
    # Made again under its name instead, it numbers on from its history.
    assert (await call("DELETE", "/v1/profiles/team"))[0] == 200
    status, body = await call("PUT", "/v1/profiles/team", {"model": "m2"})
    assert status == 200 and body["version"] == 5 and body["fields"]["persona"] == ""


async def test_a_subagent_runs_the_agent_of_its_tasks_profile(
    tmp_path: Path, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default agent is the offline one; Ann's tasks are answered by a profile of the fake
    model, and the subagent her task starts is too."""
    monkeypatch.setenv("TEAM_MODEL_KEY", model.api_key)
    async with serving(tmp_path, max_subagent_depth=1) as server:
        team = {
            "agent": "openai",
            "base_url": model.url,
            "key": "env:TEAM_MODEL_KEY",
            "model": "team-model",
        }
        status, body = await server.call("PUT", "/v1/profiles/team", json_body=team, headers=ROOT)
        assert status == 200, body
        bound = {"target": "identity:http:ann", "profile": "team"}
        assert (await server.call("PUT", "/v1/bindings", json_body=bound, headers=ROOT))[0] == 200

        model.script(
            ToolCalls([("d1", "delegate", {"task": "count the sheep"})]),
            Text("forty sheep"),  # the subagent's answer, from the same profile's model
            Text("The subagent says: forty sheep."),
        )
        status, body = await server.call(
            "POST", "/v1/send", json_body={"content": "ask a helper"}, headers=ANN
        )
        assert status == 200 and body["text"] == "The subagent says: forty sheep.", body
        assert [r["model"] for r in model.requests] == ["team-model"] * 3
        child = model.requests[1]["messages"]
        assert child[-1]["content"].endswith("count the sheep")
