"""`GET /v1/search?mode=semantic`: one session's messages closest in meaning, best first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fakes.openai import DEFAULT_EMBEDDING_MODEL, Error, FakeOpenAI
from test_http import err, serving

from gateway.events import Inbound, Origin

BOB = Origin("http", sender_id="bob", sender_name="Bob")


async def test_semantic_search_over_one_session(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        runtime = server.runtime
        assert runtime.memory is not None
        for sid, text in [
            ("cli-one", "the boiler in the basement makes a knocking noise"),
            ("cli-one", "the garden party is on Sunday"),
            ("cli-two", "the boiler in the basement was replaced"),
        ]:
            await runtime.store.ensure(sid, owner="http:tester")
            await runtime.router.record(Inbound(BOB, sid, text))
        await runtime.memory.indexer.embed_due()

        status, body = await server.call(
            "GET", "/v1/search?q=basement%20boiler%20noise&mode=semantic&session_id=cli-one"
        )
        assert status == 200, body
        hits = body["results"]
        assert hits[0]["content"] == "the boiler in the basement makes a knocking noise"
        assert hits[0]["sender"] == "Bob" and hits[0]["kind"] == "message"
        assert hits[0]["score"] > hits[-1]["score"] or len(hits) == 1
        assert {h["session_id"] for h in hits} == {"cli-one"}
        assert all("replaced" not in h["content"] for h in hits)

        # Full-text stays the default, its hits marked as such.
        status, body = await server.call("GET", "/v1/search?q=boiler")
        assert status == 200 and len(body["results"]) == 2
        assert {(h["kind"], h["score"]) for h in body["results"]} == {("message", None)}

        # Without session_id: across the caller's sessions (tests/test_semantic_across.py).
        status, body = await server.call("GET", "/v1/search?q=boiler&mode=semantic")
        assert status == 200 and body["sessions_searched"] == 2, body
        status, body = await server.call(
            "GET", "/v1/search?q=boiler&mode=semantic&session_id=cli-none"
        )
        assert (status, err(body)) == (404, "not_found")
        status, body = await server.call("GET", "/v1/search?q=boiler&mode=vector")
        assert (status, err(body)) == (400, "bad_request")


async def test_semantic_search_says_when_the_embedding_endpoint_is_away(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        options: dict[str, Any] = {
            "openai_base_url": fake.url,
            "openai_api_key": fake.api_key,
            "embedding_model": DEFAULT_EMBEDDING_MODEL,
        }
        async with serving(tmp_path, **options) as server:
            await server.runtime.store.ensure("cli-one", owner="http:tester")
            fake.fail_embeddings(Error(400, "model is loading"))
            status, body = await server.call(
                "GET", "/v1/search?q=boiler&mode=semantic&session_id=cli-one"
            )
            assert (status, err(body)) == (503, "unavailable")
            assert "model is loading" in body["error"]["message"]
