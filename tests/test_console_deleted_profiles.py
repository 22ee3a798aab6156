"""A deleted profile in the console, through the real app with aiohttp clients as browsers (the
console's cookie, its forms' CSRF token): the profile list names it under Deleted profiles,
linking to its page; that page shows its whole history, the `deleted` version included, as
`GET /v1/profiles/{name}/history` does, and no form to change or delete it; a gateway admin's
rollback from there brings it back. A viewer who is not a gateway admin gets 403."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
from test_console_knowledge import post
from test_console_signin import browsing, csrf, page
from test_http import ROOT, Server, serving

pytestmark = pytest.mark.timeout(60)

PAGE: Final = "/ui/profiles/team"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path) as srv:
        yield srv


async def api(server: Server, method: str, path: str, body: object = None) -> tuple[int, Any]:
    status, said = await server.call(method, path, json_body=body, headers=ROOT)
    return status, said


def history_rows(text: str) -> dict[int, str]:
    """Each history row's text by version, tags stripped."""
    rows = re.findall(r'<tr data-version="(\d+)">(.*?)</tr>', text, re.S)
    return {
        int(v): " ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split()) for v, row in rows
    }


def rollbacks(text: str) -> list[str]:
    """The versions the page offers a rollback to."""
    return re.findall(r'name="version" value="(\d+)">\s*<button', text)


async def test_a_deleted_profiles_history_is_shown_and_rolled_back(server: Server) -> None:
    assert (await api(server, "PUT", "/v1/profiles/team", {"model": "m-one"}))[0] == 200
    assert (await api(server, "PUT", "/v1/profiles/team", {"model": "m-two"}))[0] == 200
    async with browsing(server, "root") as root:
        token = await csrf(root)
        status, location = await post(root, f"{PAGE}/delete", {"csrf": token})
        assert (status, location) == (303, "/ui/profiles")

        status, text = await page(root, "/ui/profiles")
        assert status == 200
        assert 'data-profile="team"' not in text  # not among the live ones
        row = re.search(r'<tr data-deleted="team">(.*?)</tr>', text, re.S)
        assert row is not None and f'href="{PAGE}"' in row[1] and "http:root" in row[1]

        status, text = await page(root, PAGE)
        assert status == 200, text
        assert 'id="deleted"' in text and "Deleted in version 3" in text
        rows = history_rows(text)
        assert sorted(rows) == [1, 2, 3]
        assert "deleted" in rows[3] and "m-two" in rows[3]
        assert "created" in rows[1] and "m-one" in rows[1]
        assert rollbacks(text) == ["2", "1"]  # none to the version that deleted it
        assert f'action="{PAGE}"' not in text and f'action="{PAGE}/delete"' not in text
        _, said = await api(server, "GET", "/v1/profiles/team/history")
        assert [v["version"] for v in said["versions"]] == [1, 2, 3]
        assert said["versions"][-1]["change"] == "deleted"

        status, location = await post(root, f"{PAGE}/rollback", {"csrf": token, "version": "1"})
        assert (status, location) == (303, f"{PAGE}?saved=4")
        status, text = await page(root, location)
        assert status == 200 and 'id="deleted"' not in text
        assert '<strong id="version">4</strong>' in text and 'value="m-one"' in text
        assert f'action="{PAGE}/delete"' in text
        # Alive again, its history keeps the deletion, which offers no rollback.
        assert "deleted" in history_rows(text)[3] and rollbacks(text) == ["2", "1"]
        status, said = await api(server, "GET", "/v1/profiles/team")
        assert status == 200 and (said["version"], said["fields"]["model"]) == (4, "m-one")
        status, text = await page(root, "/ui/profiles")
        assert 'data-profile="team"' in text and 'data-deleted="team"' not in text


async def test_a_profile_that_never_was_is_not_found_and_others_get_403(server: Server) -> None:
    assert (await api(server, "PUT", "/v1/profiles/team", {"model": "m-one"}))[0] == 200
    assert (await api(server, "DELETE", "/v1/profiles/team"))[0] == 200
    async with browsing(server, "root") as root:
        status, _ = await page(root, "/ui/profiles/nobody")
        assert status == 404
    async with browsing(server, "ann") as ann:
        status, text = await page(ann, PAGE)
        assert status == 403 and "only gateway admins" in text
        status, _ = await page(ann, "/ui/profiles")
        assert status == 403
