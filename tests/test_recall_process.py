"""Semantic recall in a real gateway process: the background job embeds what is archived (on
its interval, under its lease), and a restarted gateway goes on from the stored cursor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from gateway_proc import Gateway, free_port
from support import wait_until

FILLER = ["the weather was cloudy", "we ordered pizza", "the train leaves at nine"]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    gw = Gateway(
        tmp_path / "home",
        free_port(),
        AGENVOY_EMBEDDING_INTERVAL_SECONDS="0.2",
        AGENVOY_HISTORY_WINDOW="2",
        # Searches here list what was embedded, summaries mixing several topics too: no
        # relevance threshold (tests/test_embeddings_local.py has that).
        AGENVOY_RECALL_MIN_SCORE="0",
    )
    try:
        yield gw
    finally:
        await gw.close()


async def send(http: aiohttp.ClientSession, gw: Gateway, sid: str, text: str) -> Any:
    body = {"content": text, "session_id": sid, "wait": 10}
    async with http.post(f"{gw.url}/v1/send", json=body) as resp:
        assert resp.status in (200, 202), await resp.text()
        return await resp.json()


async def semantic(http: aiohttp.ClientSession, gw: Gateway, sid: str, q: str) -> list[Any]:
    params = {"q": q, "mode": "semantic", "session_id": sid}
    async with http.get(f"{gw.url}/v1/search", params=params) as resp:
        assert resp.status == 200, await resp.text()
        results: list[Any] = (await resp.json())["results"]
        return results


async def test_the_job_embeds_and_a_restart_goes_on(gateway: Gateway) -> None:
    await gateway.start()
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gateway.url}/v1/session", json={}) as resp:
            sid = (await resp.json())["session_id"]
        await send(http, gateway, sid, "the spare key is under the blue flowerpot")
        for line in FILLER:
            await send(http, gateway, sid, line)

        async def embedded(query: str, expected: str) -> bool:
            # The job runs every 0.2 s: the API shows it once it has (bounded by wait_until).
            return any(h["content"] == expected for h in await semantic(http, gateway, sid, query))

        key = "the spare key is under the blue flowerpot"
        assert await wait_until(lambda: embedded("spare key flowerpot", key), within=15)
        reply = await send(http, gateway, sid, "!recall where is the spare key")
        assert "the spare key is under the blue flowerpot" in reply["text"], reply

        await gateway.stop()
        await gateway.start()
        await send(http, gateway, sid, "the bicycle pump is in the garage")
        pump = "the bicycle pump is in the garage"
        assert await wait_until(lambda: embedded("bicycle pump garage", pump), within=15)
        # Each message (and summary) once, across the restart: no result appears twice.
        found = await semantic(http, gateway, sid, "spare key flowerpot bicycle pump")
        items = [(h["kind"], h["id"]) for h in found]
        assert len(items) == len(set(items))
        # The offline agent's summaries (a window of 2 folds quickly) are embedded too.
        assert {kind for kind, _ in items} == {"message", "summary"}
