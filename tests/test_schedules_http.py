"""A session's schedules over HTTP: the same rule as the commands (admins only in shared chats),
clear errors for what cannot be a schedule, and the OpenAPI document describing the routes."""

from __future__ import annotations

from pathlib import Path

from openapi_spec_validator import validate as validate_openapi
from test_http import ROOT, bearer, err, member_of, serving

BOB = bearer("bob")


async def test_schedules_over_http(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        sid = (await srv.call("POST", "/v1/session"))[1]["session_id"]
        path = f"/v1/session/{sid}/schedules"
        assert await srv.call("GET", path) == (200, {"schedules": [], "next_cursor": None})
        status, made = await srv.call(
            "POST",
            path,
            json_body={
                "spec": "0 9 * * 1-5",
                "prompt": "post the summary",
                "timezone": "Asia/Tokyo",
            },
        )
        assert status == 201, made
        assert (made["id"], made["spec"], made["timezone"], made["misfire"]) == (
            1,
            "0 9 * * 1-5",
            "Asia/Tokyo",
            "once",
        )
        assert (made["created_by"], made["created_by_name"], made["last_fired_at"]) == (
            "http:tester",
            "tester",
            0,
        )
        status, other = await srv.call(
            "POST", path, json_body={"spec": "every 30m", "prompt": "x", "skip_missed": True}
        )
        assert status == 201 and other["misfire"] == "skip" and other["timezone"] == "UTC"
        status, listed = await srv.call("GET", path)
        assert [s["id"] for s in listed["schedules"]] == [1, 2]
        # Made over HTTP, seen by the commands too.
        status, body = await srv.call(
            "POST", "/v1/send", json_body={"content": "/schedules", "session_id": sid}
        )
        assert status == 200 and "#1  0 9 * * 1-5 (Asia/Tokyo)" in body["text"]
        assert (await srv.call("DELETE", f"{path}/1"))[0] == 200
        status, body = await srv.call("DELETE", f"{path}/1")
        assert (status, err(body)) == (404, "not_found")
        assert [s["id"] for s in (await srv.call("GET", path))[1]["schedules"]] == [2]


async def test_bad_schedules_are_400_never_500(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        sid = (await srv.call("POST", "/v1/session"))[1]["session_id"]
        path = f"/v1/session/{sid}/schedules"
        for body, says in [
            ({"spec": "61 * * * *", "prompt": "x"}, "not a cron expression"),
            ({"spec": "every 10s", "prompt": "x"}, "between 1m and 366d"),
            ({"spec": "every 1h", "prompt": "x", "timezone": "Nowhere"}, "unknown time zone"),
            ({"spec": "every 1h", "prompt": "/reset"}, "not a /command"),
            ({"spec": "every 1h", "prompt": "  "}, "prompt"),
            ({"spec": "every 1h"}, "prompt"),
            ({"spec": "every 1h", "prompt": "x", "when": "now"}, "when"),
        ]:
            status, answer = await srv.call("POST", path, json_body=body)
            assert (status, err(answer)) == (400, "bad_request"), (body, answer)
            assert says in answer["error"]["message"], (body, answer)
        status, answer = await srv.call(
            "POST", path, json_body={"spec": "every 1h", "prompt": "x\x00"}
        )
        assert (status, err(answer)) == (400, "bad_text")
        too_long = "x" * (srv.runtime.settings.max_message_chars + 1)
        status, answer = await srv.call(
            "POST", path, json_body={"spec": "every 1h", "prompt": too_long}
        )
        assert (status, err(answer)) == (413, "too_long")
        for schedule_id in ("x", "-1", "%C2%B2", "1" * 40, "0"):
            status, answer = await srv.call("DELETE", f"{path}/{schedule_id}")
            assert (status, err(answer)) == (404, "not_found"), schedule_id
        status, answer = await srv.call("GET", "/v1/session/cli-nobody/schedules")
        assert (status, err(answer)) == (404, "not_found")
        status, answer = await srv.call(
            "POST",
            "/v1/session/cli-nobody/schedules",
            json_body={"spec": "every 1h", "prompt": "x"},
        )
        assert (status, err(answer)) == (404, "not_found")
        assert await srv.runtime.store.get("cli-nobody") is None


async def test_shared_chats_schedule_over_http_for_admins_only(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        await srv.runtime.store.ensure("tg--100")
        path = "/v1/session/tg--100/schedules"
        body = {"spec": "every 1h", "prompt": "nag"}
        status, answer = await srv.call("POST", path, json_body=body, headers=BOB)
        assert (status, err(answer)) == (404, "not_found")  # no member: not even there
        await member_of(srv, "tg--100", "bob")
        status, answer = await srv.call("POST", path, json_body=body, headers=BOB)
        assert (status, err(answer)) == (403, "not_allowed")
        assert answer["error"]["message"] == "only an admin of this chat may manage it"
        status, made = await srv.call("POST", path, json_body=body, headers=ROOT)
        assert status == 201
        status, listed = await srv.call("GET", path, headers=BOB)  # anyone may look
        assert status == 200 and len(listed["schedules"]) == 1
        status, answer = await srv.call("DELETE", f"{path}/{made['id']}", headers=BOB)
        assert (status, err(answer)) == (403, "not_allowed")
        assert (await srv.call("DELETE", f"{path}/{made['id']}", headers=ROOT))[0] == 200
        # A schedule is removed only through its own session.
        sid = (await srv.call("POST", "/v1/session", headers=BOB))[1]["session_id"]
        status, made = await srv.call(
            "POST", f"/v1/session/{sid}/schedules", json_body=body, headers=BOB
        )
        assert status == 201
        status, answer = await srv.call("DELETE", f"{path}/{made['id']}", headers=ROOT)
        assert (status, err(answer)) == (404, "not_found")


async def test_the_document_describes_the_schedule_routes(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        status, doc = await srv.call("GET", "/openapi.json")
        assert status == 200
        validate_openapi(doc)
        routes = doc["paths"]
        listed = routes["/v1/session/{sid}/schedules"]
        assert set(listed) == {"get", "post"}
        assert "201" in listed["post"]["responses"]
        delete = routes["/v1/session/{sid}/schedules/{schedule_id}"]["delete"]
        [param] = [p for p in delete["parameters"] if p["name"] == "schedule_id"]
        assert param["in"] == "path" and param["schema"]["type"] == "integer"
