"""Live configuration over HTTP and the command line: quota overrides set by a gateway admin hold
from the very next message, a refused change names its field, and every change of a quota or a
binding is logged (who, when, before, after) and can be rolled back — by the API, or by the
operator's `agenvoy changes revert` while the gateway runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from test_http import ANN, ROOT, Server, bearer, serving
from typer.testing import CliRunner

from gateway.cli import app as cli_app


async def _send(server: Server, who: str) -> int:
    status, _body = await server.call(
        "POST", "/v1/send", json_body={"content": "hello", "wait": 0}, headers=bearer(who)
    )
    return status


async def _changes(server: Server, query: str = "") -> list[dict[str, Any]]:
    status, body = await server.call("GET", f"/v1/changes{query}", headers=ROOT)
    assert status == 200, body
    changes: list[dict[str, Any]] = body["changes"]
    return changes


async def test_only_gateway_admins_see_or_change_the_configuration(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        for method, path, body in [
            ("GET", "/v1/quotas", None),
            ("PUT", "/v1/quotas/http:ann", {"limits": {"messages_per_minute": 0}}),
            ("GET", "/v1/changes", None),
            ("POST", "/v1/changes/1/revert", None),
        ]:
            status, answer = await server.call(method, path, json_body=body, headers=ANN)
            assert (status, answer["error"]["code"]) == (403, "forbidden"), (method, path)
        status, _ = await server.call("GET", "/v1/quotas", headers=ROOT)
        assert status == 200


async def test_a_quota_set_over_http_holds_from_the_next_message_and_is_rolled_back(
    tmp_path: Path, clock: FakeClock
) -> None:
    async with serving(tmp_path, clock) as server:
        for _ in range(3):
            assert await _send(server, "ann") in (200, 202)  # no limit by default
        status, body = await server.call(
            "PUT",
            "/v1/quotas/http:ann",
            json_body={"limits": {"messages_per_minute": 1, "cost_day": 2.5}},
            headers=ROOT,
        )
        assert status == 200, body
        assert body == {
            "subject": "http:ann",
            "limits": {"cost_day": 2.5, "messages_per_minute": 1},
        }
        # From Ann's next message on, one a minute.
        assert await _send(server, "ann") in (200, 202)
        assert await _send(server, "ann") == 429
        assert await _send(server, "bob") in (200, 202)  # nobody else's limit changed

        status, body = await server.call("GET", "/v1/quotas", headers=ROOT)
        assert body["overrides"] == {"http:ann": {"cost_day": 2.5, "messages_per_minute": 1}}

        [change] = await _changes(server, "?kind=quota")
        assert change["subject"] == "http:ann" and change["changed_by"] == "http:root"
        assert change["before"] is None
        assert change["after"] == {"cost_day": 2.5, "messages_per_minute": 1}
        status, body = await server.call("POST", f"/v1/changes/{change['id']}/revert", headers=ROOT)
        assert (status, body) == (200, {"subject": "http:ann", "now": None})
        assert await _send(server, "ann") in (200, 202)

        newest = (await _changes(server, "?kind=quota"))[0]
        assert newest["reverts"] == change["id"] and newest["after"] is None
        assert newest["before"] == {"cost_day": 2.5, "messages_per_minute": 1}


async def test_a_refused_quota_change_names_its_field_and_changes_nothing(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        for subject, limits, field in [
            ("http:ann", {"bogus": 1}, "bogus"),
            ("http:ann", {"messages_per_minute": 2.5}, "messages_per_minute"),
            ("http:ann", {"tokens_day": -1}, "tokens_day"),
            ("http:ann", {"cost_day": 1e12}, "cost_day"),
            ("tg-5", {"sessions": 1}, "sessions"),  # a person's limit, not a chat's
            ("nobody", {"sessions": 1}, "subject"),
        ]:
            status, body = await server.call(
                "PUT", f"/v1/quotas/{subject}", json_body={"limits": limits}, headers=ROOT
            )
            assert status == 400, (subject, limits, body)
            assert body["error"]["message"].startswith(f"{field}: "), body
        status, body = await server.call(
            "PUT", "/v1/quotas/http:ann", json_body={"limits": {}}, headers=ROOT
        )
        assert status == 400
        assert await _changes(server, "?kind=quota") == []
        status, body = await server.call("POST", "/v1/changes/999/revert", headers=ROOT)
        assert (status, body["error"]["code"]) == (404, "not_found")


async def test_binding_changes_are_logged_and_an_unbind_is_rolled_back(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        status, _ = await server.call(
            "PUT", "/v1/profiles/team", json_body={"agent": "offline"}, headers=ROOT
        )
        assert status == 200
        bound = {"target": "prefix:cli", "profile": "team", "switchable": ["default"]}
        status, _ = await server.call("PUT", "/v1/bindings", json_body=bound, headers=ROOT)
        assert status == 200
        status, _ = await server.call("DELETE", "/v1/bindings?target=prefix:cli", headers=ROOT)
        assert status == 200

        unbound, made = await _changes(server, "?kind=binding")
        assert made["subject"] == unbound["subject"] == "prefix:cli"
        assert made["before"] is None
        assert made["after"] == {"profile": "team", "switchable": ["default"]}
        assert unbound["after"] is None and unbound["before"] == made["after"]

        status, body = await server.call(
            "POST", f"/v1/changes/{unbound['id']}/revert", headers=ROOT
        )
        assert status == 200 and body["now"] == {"profile": "team", "switchable": ["default"]}
        status, body = await server.call("GET", "/v1/bindings", headers=ROOT)
        assert [(b["target"], b["profile"]) for b in body["bindings"]] == [("prefix:cli", "team")]
        # The rollback of the first change removes the binding again.
        status, body = await server.call("POST", f"/v1/changes/{made['id']}/revert", headers=ROOT)
        assert (status, body["now"]) == (200, None)
        status, body = await server.call("GET", "/v1/bindings", headers=ROOT)
        assert body["bindings"] == []


async def test_the_change_log_pages(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        for n in range(5):
            status, _ = await server.call(
                "PUT",
                "/v1/quotas/http:ann",
                json_body={"limits": {"messages_per_minute": n + 1}},
                headers=ROOT,
            )
            assert status == 200
        seen: list[int] = []
        query = "?limit=2"
        while True:
            status, body = await server.call("GET", f"/v1/changes{query}&kind=quota", headers=ROOT)
            assert status == 200 and len(body["changes"]) <= 2
            seen += [c["after"]["messages_per_minute"] for c in body["changes"]]
            if body["next_cursor"] is None:
                break
            query = f"?limit=2&cursor={body['next_cursor']}"
        assert seen == [5, 4, 3, 2, 1]
        status, body = await server.call("GET", "/v1/changes?cursor=x", headers=ROOT)
        assert status == 400


async def test_the_operator_reverts_a_change_from_the_command_line_while_the_gateway_runs(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENVOY_HOME", str(tmp_path / "home"))
    runner = CliRunner()

    async def cli(*args: str) -> tuple[int, str]:
        result = await asyncio.to_thread(runner.invoke, cli_app, list(args))
        return result.exit_code, result.output

    async with serving(tmp_path, clock) as server:
        assert await _send(server, "ann") in (200, 202)
        assert (await cli("quota", "set", "http:ann", "messages_per_minute=1"))[0] == 0
        assert await _send(server, "ann") in (200, 202)
        assert await _send(server, "ann") == 429  # the running gateway read it at once

        code, out = await cli("changes", "list", "--kind", "quota")
        assert code == 0, out
        [line] = out.splitlines()
        number = line.split()[0]
        assert "terminal:" in line and 'http:ann: (none) → {"messages_per_minute": 1}' in line
        code, out = await cli("changes", "revert", number)
        assert (code, out) == (0, "http:ann: now (none)\n")
        assert await _send(server, "ann") in (200, 202)  # no limit again, at once
        assert (await cli("changes", "revert", "999"))[0] == 1
        code, out = await cli("changes", "list", "--kind", "nothing")
        assert code == 2


async def test_identity_links_are_logged_and_rolled_back(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        ownership = server.runtime.store.ownership
        await ownership.link("telegram:41", "http:ann", by="terminal:op")
        await ownership.link("discord:7", "http:ann", by="http:root")
        assert await ownership.unlink("discord:7", by="discord:7")
        assert not await ownership.unlink("discord:7", by="discord:7")  # nothing to log

        changes = await _changes(server, "?kind=link")
        assert [(c["subject"], c["changed_by"]) for c in changes] == [
            ("discord:7", "discord:7"),
            ("discord:7", "http:root"),
            ("telegram:41", "terminal:op"),
        ]
        unlinked, linked = changes[0], changes[1]
        assert linked["before"] is None
        assert linked["after"] == {"linked": ["discord:7", "http:ann", "telegram:41"]}
        assert unlinked["before"] == linked["after"] and unlinked["after"] is None

        # Rolling back the unlink joins the identity to its person again; rolling that back
        # takes it out again.
        status, body = await server.call(
            "POST", f"/v1/changes/{unlinked['id']}/revert", headers=ROOT
        )
        assert status == 200, body
        assert await ownership.linked("discord:7") == {"discord:7", "http:ann", "telegram:41"}
        newest = (await _changes(server, "?kind=link"))[0]
        assert newest["reverts"] == unlinked["id"] and newest["changed_by"] == "http:root"
        status, body = await server.call("POST", f"/v1/changes/{newest['id']}/revert", headers=ROOT)
        assert status == 200, body
        assert await ownership.linked("discord:7") == {"discord:7"}
        assert await ownership.linked("telegram:41") == {"http:ann", "telegram:41"}
