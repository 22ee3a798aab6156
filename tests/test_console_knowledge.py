"""The console's knowledge page through the real app, with aiohttp clients as browsers (the
console's cookie, its forms' CSRF token, multipart uploads): a gateway admin attaches a Markdown
file and sees it listed with its title and passages, reads its sections, tries a search that
shows the citation a reply would give, and removes it; a refused upload says why and keeps
nothing; a viewer who is not a gateway admin, or a form without the page's token, changes
nothing."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import aiohttp
import pytest
from test_console_signin import browsing, csrf, page
from test_http import Server, serving

from gateway.knowledge.cited import citation
from gateway.knowledge.service import Knowledge

pytestmark = pytest.mark.timeout(60)

TARGET: Final = "telegram-chat:-100123"
RULES: Final = b"""# Server rules

Be kind to each other. No spam, no ads.

## Voice channels

The voice channels close at midnight, server time, and open again at eight in the morning.

## Moderation

Three warnings mean a one-week ban. Appeals go to the moderators by direct message.
"""
QUESTION: Final = "when do the voice channels close?"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path) as srv:
        yield srv


def knowledge_of(srv: Server) -> Knowledge:
    memory = srv.runtime.memory
    assert memory is not None
    return memory.knowledge


def upload(
    token: str | None,
    name: str,
    data: bytes,
    *,
    target: str = TARGET,
    content_type: str = "text/markdown",
) -> aiohttp.FormData:
    """The attach form as a browser sends it, with a chosen file."""
    form = aiohttp.FormData()
    if token is not None:
        form.add_field("csrf", token)
    form.add_field("target", target)
    form.add_field("file", data, filename=name, content_type=content_type)
    return form


async def post(
    client: aiohttp.ClientSession, path: str, data: aiohttp.FormData | dict[str, str]
) -> tuple[int, str]:
    """Status, and where it redirects to (or the text when it does not)."""
    async with client.post(path, data=data, allow_redirects=False) as resp:
        return resp.status, resp.headers.get("Location") or await resp.text()


async def refused(client: aiohttp.ClientSession, data: aiohttp.FormData) -> str:
    """The page a refused upload is sent back to, its text unescaped."""
    status, location = await post(client, "/ui/knowledge", data)
    assert status == 303 and "?refused=" in location, (status, location)
    status, text = await page(client, location)
    assert status == 200
    return html.unescape(text)


def row(text: str, document_id: int) -> str:
    """The list's row for a document; "" when it is not listed."""
    found = re.search(rf'<tr data-document="{document_id}">(.*?)</tr>', text, re.S)
    return found[1] if found else ""


def cell(text: str, name: str) -> str:
    found = re.search(rf'<td class="{name}">(.*?)</td>', text, re.S)
    assert found is not None, name
    return html.unescape(re.sub(r"<[^>]+>", "", found[1])).strip()


def tag(text: str, element_id: str) -> str:
    found = re.search(rf'<[a-z]+ id="{element_id}"[^>]*>', text)
    assert found is not None, element_id
    return found[0]


async def test_an_admin_attaches_reads_searches_and_removes_a_document(server: Server) -> None:
    knowledge = knowledge_of(server)
    async with browsing(server, "root") as root:
        token = await csrf(root)
        status, location = await post(root, "/ui/knowledge", upload(token, "rules.md", RULES))
        assert status == 303 and location.startswith("/ui/knowledge?added="), (status, location)
        (document,) = await knowledge.archive.documents()
        assert location == f"/ui/knowledge?added={document.id}"
        assert document.target == TARGET and document.added_by == "http:root"
        assert document.media_type == "text/markdown" and document.chunks >= 3

        status, text = await page(root, location)
        assert status == 200 and 'href="/ui/knowledge"' in text
        listed = row(text, document.id)
        assert cell(listed, "title") == "Server rules"  # the first heading, not the file name
        assert cell(listed, "passages") == str(document.chunks)
        assert cell(listed, "target") == TARGET and cell(listed, "by") == "http:root"
        assert cell(listed, "type") == "text/markdown"
        assert f"Attached: document {document.id}" in text

        # The same bytes again, to the same target: refused, naming the one attached.
        said = await refused(root, upload(token, "copy.md", RULES))
        assert f"already, as document {document.id} (Server rules)" in said
        assert len(await knowledge.archive.documents()) == 1

        status, text = await page(root, f"/ui/knowledge/{document.id}")
        assert status == 200
        sections = [p.section for p in await knowledge.archive.passages(document.id)]
        assert any(s.endswith("Voice channels") for s in sections), sections
        shown = [html.unescape(s) for s in re.findall(r'<h3 class="section">(.*?)</h3>', text)]
        assert shown == sections
        assert "close at midnight" in text

        query = f"/ui/knowledge?target={TARGET}&q={QUESTION.replace(' ', '+')}"
        status, text = await page(root, query)
        assert status == 200
        found = await knowledge.search([TARGET], QUESTION, 10)
        assert citation(found[0]) == "Server rules § Voice channels"
        first = re.search(r'<li class="result"(.*?)</li>', text, re.S)
        assert first is not None, text
        assert f'class="citation">{html.escape(citation(found[0]))}</a>' in first[1]
        assert f'<span class="score">{found[0].score:.3f}</span>' in first[1]
        assert "close at midnight" in first[1]

        # A search with a target that is none says why, and finds nothing.
        status, text = await page(root, "/ui/knowledge?target=nowhere:1&q=voice")
        assert status == 200 and 'id="search-error"' in text
        assert '<li class="result"' not in text

        removing = f"/ui/knowledge/{document.id}/remove"
        status, location = await post(root, removing, {"csrf": token})
        assert (status, location) == (303, f"/ui/knowledge?removed={document.id}")
        assert await knowledge.archive.documents() == []
        status, text = await page(root, location)
        assert row(text, document.id) == "" and "No documents are attached." in text

        # Removed already: the page says so.
        status, location = await post(root, removing, {"csrf": token})
        assert status == 303 and "?refused=" in location
        status, text = await page(root, location)
        assert f"there is no document {document.id}: removed already?" in text
        status, _ = await page(root, f"/ui/knowledge/{document.id}")
        assert status == 404


async def test_a_refused_upload_says_why_and_keeps_nothing(server: Server) -> None:
    knowledge = knowledge_of(server)
    async with browsing(server, "root") as root:
        token = await csrf(root)
        said = await refused(
            root, upload(token, "setup.exe", b"MZ\x90\x00", content_type="application/x-msdownload")
        )
        assert "Not attached: cannot tell what kind of document 'setup.exe'" in said
        assert 'aria-invalid="true"' in tag(said, "k-file")
        assert f'value="{TARGET}"' in tag(said, "k-target")  # kept for another try

        said = await refused(root, upload(token, "empty.md", b""))
        assert "Not attached: the document is empty" in said

        said = await refused(root, upload(token, "rules.md", RULES, target="nowhere:1"))
        assert "Not attached:" in said and "profile:NAME" in said
        assert 'aria-invalid="true"' in tag(said, "k-target")

        nothing = aiohttp.FormData({"csrf": token, "target": TARGET})
        nothing.add_field("file", b"", filename="")  # a file input left empty
        said = await refused(root, nothing)
        assert "Not attached: choose a file to attach" in said

        # No hosts are allowed: no URL field, and a URL sent anyway is not fetched.
        assert 'name="url"' not in said and "AGENVOY_KNOWLEDGE_HOSTS" in said
        by_url = aiohttp.FormData(
            {"csrf": token, "target": TARGET, "url": "https://example.org/rules.md"}
        )
        said = await refused(root, by_url)
        assert "not fetched from URLs until the operator lists the hosts" in said

        # Over the console's request limit: 413, before anything is read.
        large = upload(token, "large.md", b"# Large\n\n" + b"word " * 220_000)
        status, text = await post(root, "/ui/knowledge", large)
        assert status == 413, status
        assert 'role="alert"' in text
    assert await knowledge.archive.documents() == []


async def test_the_url_field_names_the_hosts_allowed(tmp_path: Path) -> None:
    async with (
        serving(tmp_path, knowledge_hosts="docs.example.org") as srv,
        browsing(srv, "root") as root,
    ):
        status, text = await page(root, "/ui/knowledge")
        assert status == 200 and 'name="url"' in text
        assert "from docs.example.org only" in text
        token = await csrf(root)
        both = upload(token, "rules.md", RULES)
        both.add_field("url", "https://docs.example.org/rules.md")
        said = await refused(root, both)
        assert "Not attached: choose a file or give a URL, not both" in said
        assert 'aria-invalid="true"' in tag(said, "k-url")
        assert 'value="https://docs.example.org/rules.md"' in tag(said, "k-url")
        elsewhere = aiohttp.FormData(
            {"csrf": token, "target": TARGET, "url": "https://example.org/rules.md"}
        )
        said = await refused(root, elsewhere)
        assert "is on example.org, which is not allowed" in said
        assert 'aria-invalid="true"' in tag(said, "k-url")
        assert await knowledge_of(srv).archive.documents() == []


async def test_a_viewer_who_is_not_a_gateway_admin_gets_403(server: Server) -> None:
    knowledge = knowledge_of(server)
    kept = await knowledge.add(TARGET, name="rules.md", data=RULES, by="terminal:op")
    async with browsing(server, "ann") as ann:
        status, text = await page(ann, "/ui/")
        assert status == 200 and 'href="/ui/knowledge"' not in text
        for path in (
            "/ui/knowledge",
            f"/ui/knowledge/{kept.id}",
            f"/ui/knowledge?target={TARGET}&q=voice",
        ):
            status, text = await page(ann, path)
            assert status == 403 and "only gateway admins manage knowledge" in text, path
        token = await csrf(ann)  # her own page's token: the refusal is for who she is
        status, text = await post(ann, "/ui/knowledge", upload(token, "notes.md", b"# Notes\n\nx"))
        assert status == 403 and "only gateway admins" in text
        status, text = await post(ann, f"/ui/knowledge/{kept.id}/remove", {"csrf": token})
        assert status == 403 and "only gateway admins" in text
    assert [d.id for d in await knowledge.archive.documents()] == [kept.id]


async def test_a_form_without_the_pages_csrf_token_changes_nothing(server: Server) -> None:
    knowledge = knowledge_of(server)
    kept = await knowledge.add(TARGET, name="rules.md", data=RULES, by="terminal:op")
    async with browsing(server, "root") as root:
        status, text = await post(root, "/ui/knowledge", upload(None, "notes.md", b"# Notes\n\nx"))
        assert status == 403 and "stale or forged" in text
        forged = upload("0" * 64, "notes.md", b"# Notes\n\nx")
        status, text = await post(root, "/ui/knowledge", forged)
        assert status == 403 and "stale or forged" in text
        status, text = await post(root, f"/ui/knowledge/{kept.id}/remove", {})
        assert status == 403 and "stale or forged" in text
    assert [d.id for d in await knowledge.archive.documents()] == [kept.id]
