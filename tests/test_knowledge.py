"""Knowledge with citations: a document attached to a Telegram group reaches the openai agent's
model as numbered passages (never another group's), and the reply in the chat names the
document and section it cited; over HTTP, gateway admins attach, read, search and remove."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text
from fakes.telegram import FakeTelegram
from telegram_rig import reply_in, running
from test_http import ANN, ROOT, Server, serving
from test_knowledge_documents import pdf

from gateway.knowledge.cited import KNOWLEDGE_HEADER, SOURCES, Cited, citation, with_sources

RULES = b"""# Server rules

Be kind to each other. No spam, no ads.

## Voice channels

The voice channels close at midnight, server time, and open again at eight in the morning.
Music bots are allowed in the Lounge channel only.

## Moderation

Three warnings mean a one-week ban. Appeals go to the moderators by direct message.
"""
OTHER_RULES = b"""# Guild handbook

## Voice channels

The voice channels never close; they are open all night long for raids.
"""


def _notes(request: dict[str, object]) -> list[str]:
    messages = request["messages"]
    assert isinstance(messages, list)
    return [m["content"] for m in messages if m["role"] == "system"]


async def test_an_answer_from_an_attached_document_cites_it_in_the_chat(tmp_path: Path) -> None:
    async with (
        FakeOpenAI() as model,
        FakeTelegram() as telegram,
        running(telegram, tmp_path / "home", **model.agent_settings()) as rig,
    ):
        memory = rig.runtime.memory
        assert memory is not None
        knowledge = memory.knowledge
        ours = await knowledge.add(
            "telegram-chat:-310", name="rules.md", data=RULES, by="terminal:op"
        )
        await knowledge.add(
            "telegram-chat:-311", name="handbook.md", data=OTHER_RULES, by="terminal:op"
        )
        assert ours.title == "Server rules" and ours.chunks >= 3

        model.script(Text("The voice channels close at midnight [1]."))
        group = telegram.group(-310, "crew")
        ann = telegram.user(41, "Ann")
        bot = telegram.bot_user["username"]
        telegram.inject_message(group, ann, f"@{bot} when do the voice channels close?")
        said = (await reply_in(telegram, -310, "close at midnight [1]"))["text"]

        (note,) = [n for n in _notes(model.requests[0]) if n.startswith(KNOWLEDGE_HEADER)]
        assert "close at midnight" in note.splitlines()[1]  # the best passage is [1]
        assert "never close" not in note  # another group's document stays there
        found = await knowledge.search(
            ["telegram-chat:-310"], "when do the voice channels close?", 1
        )
        assert found[0].section.endswith("Voice channels")
        assert f"{SOURCES}\n[1] {citation(found[0])}" in said
        assert citation(found[0]) == "Server rules § Voice channels"

        # The document removed, the next question gets no passages and no sources line.
        await knowledge.remove(ours.id)
        model.script(Text("I do not know [1]."))
        telegram.inject_message(group, ann, f"@{bot} and when do they open?")
        said = (await reply_in(telegram, -310, "I do not know"))["text"]
        assert SOURCES not in said
        assert not [n for n in _notes(model.requests[1]) if n.startswith(KNOWLEDGE_HEADER)]


def test_only_the_passages_a_reply_cites_are_named() -> None:
    found = [
        Cited(1, "Rules", "Voice", "closes at midnight", 0.9),
        Cited(2, "FAQ", "page 3", "bring a towel", 0.8),
    ]
    assert with_sources("No idea.", found) == "No idea."
    assert with_sources("Midnight [1], towel [2], again [1], bogus [7].", found).endswith(
        f"{SOURCES}\n[1] Rules § Voice\n[2] FAQ § page 3"
    )
    assert with_sources("Towel [2].", found).endswith(f"{SOURCES}\n[2] FAQ § page 3")
    assert with_sources("Midnight [1].", []) == "Midnight [1]."


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path) as srv:
        yield srv


async def test_admins_attach_read_search_and_remove_over_http(server: Server) -> None:
    attach = {"target": "profile:default", "name": "rules.md", "text": RULES.decode()}
    status, body = await server.call("POST", "/v1/knowledge", json_body=attach, headers=ANN)
    assert status == 403, body
    status, body = await server.call("GET", "/v1/knowledge", headers=ANN)
    assert status == 403, body

    status, made = await server.call("POST", "/v1/knowledge", json_body=attach, headers=ROOT)
    assert status == 201, made
    assert made["title"] == "Server rules" and made["added_by"] == "http:root"
    assert made["media_type"] == "text/markdown" and made["passages"] >= 3
    status, body = await server.call("POST", "/v1/knowledge", json_body=attach, headers=ROOT)
    assert status == 409 and f"document {made['id']}" in body["error"]["message"]

    status, body = await server.call("GET", "/v1/knowledge?target=profile:default", headers=ROOT)
    assert status == 200 and [d["id"] for d in body["documents"]] == [made["id"]]
    status, body = await server.call("GET", "/v1/knowledge?target=profile:other", headers=ROOT)
    assert status == 200 and body["documents"] == []
    status, body = await server.call("GET", f"/v1/knowledge/{made['id']}", headers=ROOT)
    assert status == 200 and len(body["passages"]) == made["passages"]
    assert any("midnight" in p["text"] for p in body["passages"])

    query = "/v1/search/knowledge?target=profile:default&q=when+do+voice+channels+close"
    status, body = await server.call("GET", query, headers=ROOT)
    assert status == 200 and body["results"], body
    assert "midnight" in body["results"][0]["text"]

    status, body = await server.call("DELETE", f"/v1/knowledge/{made['id']}", headers=ROOT)
    assert status == 200 and body == {"removed": True}
    status, body = await server.call("DELETE", f"/v1/knowledge/{made['id']}", headers=ROOT)
    assert status == 404
    status, body = await server.call("GET", f"/v1/knowledge/{made['id']}", headers=ROOT)
    assert status == 404


async def test_refused_documents_say_why(server: Server) -> None:
    cases = [
        ({"target": "nowhere:1", "text": "x"}, "target"),
        ({"target": "profile:default", "text": "   "}, "no text"),
        ({"target": "profile:default", "name": "a.exe", "data": "AAAA"}, "(.txt)"),
        ({"target": "profile:default", "name": "a.pdf", "data": "not base64!"}, "base64"),
        (
            {
                "target": "profile:default",
                "name": "a.pdf",
                "data": base64.b64encode(b"%PDF-x").decode(),
            },
            "PDF",
        ),
        ({"target": "profile:default", "url": "https://example.org/rules.md"}, "KNOWLEDGE_HOSTS"),
        ({"target": "profile:default", "text": "a", "url": "https://example.org/"}, "one of"),
    ]
    for attach, said in cases:
        status, body = await server.call("POST", "/v1/knowledge", json_body=attach, headers=ROOT)
        assert status == 400, (attach, body)
        assert said in body["error"]["message"], (attach, body)
    status, body = await server.call("GET", "/v1/knowledge", headers=ROOT)
    assert status == 200 and body["documents"] == []  # nothing half-kept


async def test_a_session_document_is_that_sessions_and_a_profiles_is_everywhere_it_answers(
    server: Server,
) -> None:
    knowledge = server.runtime.memory.knowledge if server.runtime.memory else None
    assert knowledge is not None
    await knowledge.add("session:dc-901", name="notes.txt", data=b"The wifi is lobster42.", by="t")
    await knowledge.add("profile:default", name="faq.md", data=RULES, by="t")
    question = "what is the wifi password and when do the voice channels close?"
    knowledge.min_score = -1.0  # every passage counts: the test is about where, not how alike
    here = await knowledge.for_task("dc-901", None, "default", question)
    there = await knowledge.for_task("dc-902", None, "default", question)
    other_profile = await knowledge.for_task("dc-901", None, "team", question)
    assert {c.title for c in here} == {"notes.txt", "Server rules"}
    assert {c.title for c in there} == {"Server rules"}
    assert {c.title for c in other_profile} == {"notes.txt"}


async def test_a_pdf_over_http_is_cited_by_page(server: Server) -> None:
    manual = pdf(
        ["Welcome to the printer manual."],
        ["To clear a paper jam, open the rear door and pull the sheet out slowly."],
        title="Printer manual",
    )
    attach = {
        "target": "discord-guild:77",
        "name": "manual.pdf",
        "data": base64.b64encode(manual).decode(),
    }
    status, made = await server.call("POST", "/v1/knowledge", json_body=attach, headers=ROOT)
    assert status == 201, made
    assert made["title"] == "Printer manual" and made["media_type"] == "application/pdf"
    query = "/v1/search/knowledge?target=discord-guild:77&q=how+do+I+clear+a+paper+jam"
    status, body = await server.call("GET", query, headers=ROOT)
    assert status == 200 and body["results"], body
    best = body["results"][0]
    assert best["section"] == "page 2" and "rear door" in best["text"]
