"""A model agent with no fallbacks — the default agent without AGENVOY_FALLBACK, a profile
without `fallbacks` — is counted in /metrics' `agenvoy_model_*` families as a chain's targets
are, through a real HTTP server and the fake OpenAI provider. It gets no breaker: a failing
provider is tried as often as before, and the next task tries it again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from fakes.openai import Error, FakeOpenAI, Text
from test_fallback import FALLBACK, PRIMARY, models_asked, send
from test_http import ROOT, Samples, Server, sample, scrape, serving

from gateway.agents.fallback import FallbackChain

LONE = "lone-model"


def provider(model: FakeOpenAI) -> str:
    return f"openai@{model.url.split('/')[2]}"


def breaker_shown(samples: Samples, model: str) -> bool:
    return any(
        name == "agenvoy_model_breaker_state" and ("model", model) in labels
        for name, labels in samples
    )


async def put(server: Server, path: str, fields: dict[str, object]) -> None:
    status, body = await server.call("PUT", path, json_body=fields, headers=ROOT)
    assert status == 200, body


async def test_the_default_agent_alone_is_counted_without_a_breaker(
    model: FakeOpenAI, tmp_path: Path
) -> None:
    clock = FakeClock()
    lone: dict[str, Any] = model.agent_settings(LONE)
    async with serving(tmp_path, clock, **lone) as server:
        assert not isinstance(server.runtime.agent, FallbackChain)
        at = {"model": LONE, "provider": provider(model)}

        model.script(Error(429, "Rate limit reached", retry_after=1), Text("Hello there, Ann."))
        body = await send(server, clock, "hi")
        assert (body["status"], body["text"]) == ("done", "Hello there, Ann.")
        samples = await scrape(server)
        tokens = "agenvoy_model_tokens_total"
        assert sample(samples, tokens, **at, direction="output") == 3  # in words
        assert sample(samples, tokens, **at, direction="input") > 0
        assert sample(samples, "agenvoy_model_call_seconds_count", **at) == 1
        errors = "agenvoy_model_errors_total"
        assert sample(samples, errors, **at, kind="rate_limited") == 1
        assert not breaker_shown(samples, LONE)

        # A provider that keeps failing is tried four times, as ever, and the task fails.
        model.script(*[Error(500, "The server had an error")] * 4)
        body = await send(server, clock, "again")
        assert body["status"] == "error" and "not available" in body["error"], body
        assert models_asked(model) == [LONE] * 6
        samples = await scrape(server)
        assert sample(samples, errors, **at, kind="server_error") == 4
        assert sample(samples, "agenvoy_model_call_seconds_count", **at) == 1
        assert not breaker_shown(samples, LONE)

        # No breaker skips it: the next task asks the provider again at once.
        model.script(Text("Back."))
        assert (await send(server, clock, "and now"))["text"] == "Back."
        samples = await scrape(server)
        assert sample(samples, "agenvoy_model_call_seconds_count", **at) == 2


async def test_a_profile_without_fallbacks_is_counted_and_a_chain_counts_its_members_once(
    model: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone profile's calls are counted under its model; the lone default agent, taken up as
    another profile's fallback, is counted by that chain alone (not twice)."""
    monkeypatch.setenv("TEAM_MODEL_KEY", model.api_key)
    clock = FakeClock()
    settings: dict[str, Any] = model.agent_settings(FALLBACK)
    async with serving(tmp_path, clock, **settings) as server:
        endpoint = {"agent": "openai", "base_url": model.url, "key": "env:TEAM_MODEL_KEY"}
        await put(server, "/v1/profiles/solo", {**endpoint, "model": PRIMARY})
        await put(server, "/v1/bindings", {"target": "identity:http:ann", "profile": "solo"})

        model.script(Text("Solo here."))
        assert (await send(server, clock, "hi"))["text"] == "Solo here."
        samples = await scrape(server)
        solo = {"model": PRIMARY, "provider": provider(model)}
        assert sample(samples, "agenvoy_model_tokens_total", **solo, direction="output") == 2
        assert sample(samples, "agenvoy_model_call_seconds_count", **solo) == 1
        assert not breaker_shown(samples, PRIMARY)

        # The same profile with the default agent as its fallback: the primary is rate
        # limited for too long, the default agent answers within the chain.
        await put(server, "/v1/profiles/solo", {"fallbacks": ["default"]})
        model.script(Error(429, "Rate limit reached", retry_after=120), Text("From the default."))
        body = await send(server, clock, "hello")
        assert (body["status"], body["text"]) == ("done", "From the default.")
        assert models_asked(model) == [PRIMARY, PRIMARY, FALLBACK]
        samples = await scrape(server)
        default = {"model": FALLBACK, "provider": provider(model)}
        assert sample(samples, "agenvoy_model_tokens_total", **default, direction="output") == 3
        assert sample(samples, "agenvoy_model_call_seconds_count", **default) == 1
