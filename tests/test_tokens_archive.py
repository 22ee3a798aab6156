"""Per-user API tokens live in the archive: a token a gateway admin issues over HTTP on one
instance is accepted by another within a second or so, and revoked on the second it closes the
first one's event stream within a second; each issue and revocation is in the change log, a
revocation is never rolled back (the token may have leaked) while an issue is (it revokes).
A home's old token file is taken in once, and a token revoked since is not taken in again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support import wait_until
from test_http import ANN, ROOT, Server, err, next_frame, serving

from gateway.store.tokens import IMPORTED_SUFFIX

WITHIN = 1.0  # seconds from a revocation on one instance to the end of a stream on another


async def _accepted(srv: Server, token: str) -> bool:
    status, _ = await srv.call("GET", "/v1/sessions", headers={"Authorization": f"Bearer {token}"})
    return status == 200


async def test_a_token_issued_on_one_instance_and_revoked_on_another(
    tmp_path: Path, database_url: str
) -> None:
    async with (
        serving(tmp_path / "a", database_url=database_url) as one,
        serving(tmp_path / "b", database_url=database_url) as two,
    ):
        status, body = await one.call(
            "POST", "/v1/tokens", json_body={"name": "zed", "display": "Zed Z"}, headers=ROOT
        )
        assert status == 201, body
        assert (body["identity"], body["display"]) == ("http:zed", "Zed Z")
        token = body["token"]
        zed = {"Authorization": f"Bearer {token}"}
        assert await wait_until(lambda: _accepted(two, token), within=3)
        status, listed = await two.call("GET", "/v1/tokens", headers=ROOT)
        assert {"identity": "http:zed", "display": "Zed Z"} in listed["tokens"]
        assert token not in str(listed)

        # Zed watches a session of theirs on instance one; instance two revokes the token.
        status, made = await one.call("POST", "/v1/session", json_body={}, headers=zed)
        assert status in (200, 201), made
        log = await one.client.get(
            one.url(f"/v1/session/{made['session_id']}/log?tail=0"), headers=zed
        )
        assert log.status == 200
        first = await next_frame(log)
        assert first is not None and first.comments == ["live"]
        loop = asyncio.get_running_loop()
        status, body = await two.call("DELETE", "/v1/tokens/zed", headers=ROOT)
        assert (status, body) == (200, {"revoked": True})
        # From the revocation's answer, when it is stored: beside a busy suite the write itself
        # can wait on the other instance's lock on the shared SQLite file.
        revoked_at = loop.time()
        last = None
        while (frame := await next_frame(log)) is not None:
            last = frame
        assert loop.time() - revoked_at < WITHIN
        assert last is not None and last.event == "revoked"
        log.close()
        assert (await one.call("GET", "/v1/sessions", headers=zed))[0] == 403

        status, body = await one.call("GET", "/v1/changes?kind=token&subject=zed", headers=ROOT)
        revoked, issued = body["changes"]
        assert issued["changed_by"] == "http:root" and issued["before"] is None
        assert issued["after"]["display"] == "Zed Z"
        assert token not in str(body) and issued["after"]["sha256_prefix"] in str(revoked)
        assert revoked["after"] is None
        # A revocation is not undone; the issue it followed is no longer the token held.
        status, body = await one.call("POST", f"/v1/changes/{revoked['id']}/revert", headers=ROOT)
        assert status == 409 and "not brought back" in body["error"]["message"]
        status, body = await one.call("POST", f"/v1/changes/{issued['id']}/revert", headers=ROOT)
        assert status == 409

        # The rollback of an issue revokes that token.
        status, body = await two.call("POST", "/v1/tokens", json_body={"name": "yan"}, headers=ROOT)
        assert status == 201
        yan = body["token"]
        status, body = await two.call("GET", "/v1/changes?kind=token&subject=yan", headers=ROOT)
        [change] = body["changes"]
        status, body = await one.call("POST", f"/v1/changes/{change['id']}/revert", headers=ROOT)
        assert (status, body) == (200, {"subject": "yan", "now": None})
        assert await wait_until(lambda: _refused(two, yan), within=3)


async def _refused(srv: Server, token: str) -> bool:
    status, _ = await srv.call("GET", "/v1/sessions", headers={"Authorization": f"Bearer {token}"})
    return status == 403


async def test_only_gateway_admins_manage_tokens_and_a_refused_name_is_named(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as srv:
        for method, path in (
            ("GET", "/v1/tokens"),
            ("POST", "/v1/tokens"),
            ("DELETE", "/v1/tokens/bob"),
        ):
            status, body = await srv.call(method, path, json_body={"name": "x"}, headers=ANN)
            assert (status, err(body)) == (403, "forbidden"), (method, path)
        status, body = await srv.call("POST", "/v1/tokens", json_body={"name": "api"}, headers=ROOT)
        assert status == 400 and "reserved" in body["error"]["message"]
        status, body = await srv.call("POST", "/v1/tokens", json_body={"name": "ann"}, headers=ROOT)
        assert status == 409 and "already" in body["error"]["message"]
        status, body = await srv.call("DELETE", "/v1/tokens/nobody", headers=ROOT)
        assert (status, err(body)) == (404, "not_found")


async def test_a_homes_token_file_is_taken_in_once(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        store_dir = srv.runtime.settings.store_dir
        assert not (store_dir / "api_tokens.json").exists()
        assert (store_dir / f"api_tokens.json{IMPORTED_SUFFIX}").exists()
        assert await _accepted(srv, "agv_test-ann")
        status, body = await srv.call("GET", "/v1/changes?kind=token&subject=ann", headers=ROOT)
        assert body["changes"][0]["changed_by"] == "import:api_tokens.json"
        status, _ = await srv.call("DELETE", "/v1/tokens/ann", headers=ROOT)
        assert status == 200
    # The same home again (its tokens are not written anew): ann's token stays revoked.
    async with serving(tmp_path, users=None) as srv:
        assert await _accepted(srv, "agv_test-bob")
        assert await _refused(srv, "agv_test-ann")
