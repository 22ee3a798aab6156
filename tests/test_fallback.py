"""Model fallback: a provider that fails (429 with Retry-After, 5xx) hands the task to the
next model of the chain, through a real HTTP server and the fake OpenAI provider; breakers
skip a failing target and try it again after the cool-down (on the test's clock)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import pytest
from clock import FakeClock
from fakes.openai import Cut, Error, FakeOpenAI, Text
from fakes.telegram import FakeTelegram
from telegram_rig import reply_in, sent_to, start_rig, stop_rig
from test_http import ANN, ROOT, Server, sample, scrape, serving
from test_openai_agent import usage_rows

from gateway.agents.fallback import FallbackChain
from gateway.runtime import Runtime, UnknownAgent
from gateway.settings import Settings

T = TypeVar("T")
PRIMARY, FALLBACK = "primary-model", "fallback-model"
BACKOFF_UNDER = 30.0
PREVIEW_CALLS = (
    "sendMessage",
    "editMessageText",
)  # retry and switch waits are shorter; presence refreshes are longer


def chain_settings(model: FakeOpenAI, **extra: Any) -> dict[str, Any]:
    """The primary and its fallback on the one fake provider: the fallback names only its
    model, so it uses the configured endpoint and key."""
    return {**model.agent_settings(PRIMARY), "fallback": f"openai:{FALLBACK}", **extra}


async def send(server: Server, clock: FakeClock, text: str) -> Any:
    async def call() -> Any:
        return await server.call("POST", "/v1/send", json_body={"content": text}, headers=ANN)

    status, body = await clock.past_backoffs(call(), under=BACKOFF_UNDER)
    assert status == 200, body
    return body


def models_asked(model: FakeOpenAI) -> list[str]:
    return [str(r["model"]) for r in model.requests]


def fallback_lines(runtime: Runtime, session_id: str) -> list[dict[str, Any]]:
    records = runtime.store.files(session_id).action_log.read()
    return [json.loads(r.body) for r in records if r.kind == "fallback"]


async def test_a_rate_limited_then_failing_provider_answers_from_the_fallback(
    model: FakeOpenAI, tmp_path: Path
) -> None:
    clock = FakeClock()
    async with serving(tmp_path, clock, **chain_settings(model)) as server:
        assert isinstance(server.runtime.agent, FallbackChain)
        # The primary is rate limited for two minutes: too long to wait, so the task switches.
        # The fallback's first try fails with a 500; its own retry answers.
        model.script(
            Error(429, "Rate limit reached", retry_after=120),
            Error(500, "The server had an error"),
            Text("Hello from the fallback."),
        )
        body = await send(server, clock, "hi")
        assert (body["status"], body["text"]) == ("done", "Hello from the fallback.")
        assert [e["kind"] for e in body["events"]].count("text") == 1
        assert models_asked(model) == [PRIMARY, FALLBACK, FALLBACK]

        # The one model call that answered is the one usage row, naming the fallback.
        assert [row[0] for row in await usage_rows(server.runtime)] == [FALLBACK]
        (line,) = fallback_lines(server.runtime, body["session_id"])
        assert (line["from"], line["to"], line["reason"]) == (PRIMARY, FALLBACK, "rate_limited")
        assert "429" in line["detail"]

        samples = await scrape(server)
        provider = f"openai@{model.url.split('/')[2]}"
        fallbacks = sample(
            samples,
            "agenvoy_model_fallbacks_total",
            from_model=PRIMARY,
            from_provider=provider,
            to_model=FALLBACK,
            to_provider=provider,
            reason="rate_limited",
        )
        assert fallbacks == 1
        errors = "agenvoy_model_errors_total"
        assert sample(samples, errors, model=PRIMARY, provider=provider, kind="rate_limited") == 1
        assert sample(samples, errors, model=FALLBACK, provider=provider, kind="server_error") == 1
        tokens = "agenvoy_model_tokens_total"
        out = sample(samples, tokens, model=FALLBACK, provider=provider, direction="output")
        assert out == 4  # "Hello from the fallback." in words
        calls = "agenvoy_model_call_seconds_count"
        assert sample(samples, calls, model=FALLBACK, provider=provider) == 1
        assert sample(samples, calls, model=PRIMARY, provider=provider) == 0
        breaker = "agenvoy_model_breaker_state"
        assert sample(samples, breaker, model=PRIMARY, provider=provider) == 0  # 1 of 3 failures


async def test_the_breaker_skips_a_failing_model_until_its_cool_down_ends(
    model: FakeOpenAI, tmp_path: Path
) -> None:
    clock = FakeClock()
    options = chain_settings(model, breaker_failures=2, breaker_cooldown_seconds=60)
    async with serving(tmp_path, clock, **options) as server:
        provider = f"openai@{model.url.split('/')[2]}"

        async def state() -> float:
            samples = await scrape(server)
            return sample(samples, "agenvoy_model_breaker_state", model=PRIMARY, provider=provider)

        for n in (1, 2):  # two failures in a row open it
            model.script(Error(429, "Rate limit reached", retry_after=10), Text(f"answer {n}"))
            assert (await send(server, clock, f"question {n}"))["text"] == f"answer {n}"
        assert models_asked(model) == [PRIMARY, FALLBACK] * 2
        assert await state() == 2  # open

        model.reset()
        model.script(Text("answer 3"))
        assert (await send(server, clock, "question 3"))["text"] == "answer 3"
        assert models_asked(model) == [FALLBACK]  # the primary was not even asked

        await clock.advance(60)  # the cool-down passes: one task may try it again
        assert await state() == 1  # half-open
        model.reset()
        model.script(Text("the primary is back"))
        body = await send(server, clock, "question 4")
        assert body["text"] == "the primary is back"
        assert models_asked(model) == [PRIMARY]
        assert await state() == 0  # closed again
        samples = await scrape(server)
        opened = "agenvoy_model_breaker_opened_total"
        assert sample(samples, opened, model=PRIMARY, provider=provider) == 1


async def test_a_telegram_chat_gets_one_reply_when_the_model_fails_mid_answer(
    model: FakeOpenAI, telegram: FakeTelegram, tmp_path: Path
) -> None:
    clock = FakeClock()
    rig = await start_rig(telegram, tmp_path / "home", clock=clock, **chain_settings(model))
    try:
        # The primary streams part of an answer and drops, twice (its own retry): the chat
        # saw a preview of that text, and the fallback's answer must not repeat it.
        model.script(
            Cut("The primary began to answer and", pieces=3),
            Cut("The primary began to answer and", pieces=3),
            Text("The fallback answers in full."),
        )
        telegram.inject_message(telegram.private_chat(77), telegram.user(77, "Ann"), "hello")

        async def replied() -> Any:
            return await reply_in(telegram, 77, "The fallback answers in full.")

        final = await clock.past_backoffs(replied(), under=BACKOFF_UNDER)
        assert final["text"] == "The fallback answers in full."
        assert models_asked(model) == [PRIMARY, PRIMARY, FALLBACK]
        # What streamed: the primary's words, the line where the fallback took over, then
        # the fallback's answer (the text the preview showed as it came).
        records = rig.runtime.store.files("tg-77").action_log.read()
        streamed = "".join(json.loads(r.body)["text"] for r in records if r.kind == "text_delta")
        marker = "\n\n— switched to fallback-model: server error —\n\n"
        assert streamed == "The primary " + marker + "The fallback answers in full."
        # The preview made way for the reply: exactly one message stays in the chat.
        await telegram.wait_for_call("deleteMessage", timeout=10)
        assert sent_to(telegram, 77) == ["The fallback answers in full."]
        (line,) = fallback_lines(rig.runtime, "tg-77")
        assert line["reason"] == "server_error"
    finally:
        await stop_rig(rig)


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("openai,,offline", "item 2 is empty"),
        ("gpt4:mini", "unknown agent 'gpt4'"),
        ("openai:m@ftp://host/v1", "after @ comes a base URL"),
        ("openai;key=sk-live-123", "never the key itself"),
        ("openai;key=FALLBACK_KEY_NOT_SET", "FALLBACK_KEY_NOT_SET"),
        ("offline:big", "offline agent takes no model"),
    ],
)
async def test_a_bad_fallback_setting_stops_the_start_naming_the_bad_part(
    spec: str, named: str, tmp_path: Path
) -> None:
    settings = Settings(home=tmp_path / "home", _env_file=None, fallback=spec)
    with pytest.raises(UnknownAgent, match="AGENVOY_FALLBACK") as caught:
        await Runtime.start(settings)
    assert named in str(caught.value)
    assert "sk-live-123" not in str(caught.value)  # a pasted key is never repeated


async def test_a_profile_falls_back_to_the_profiles_it_lists(
    model: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile's `fallbacks` are profiles: its task goes on with the next one's agent when
    its provider fails, and the fallback's breaker and counts are in /metrics beside the
    default agent's (here the offline agent, with no chain of its own)."""
    monkeypatch.setenv("TEAM_MODEL_KEY", model.api_key)
    clock = FakeClock()
    async with serving(tmp_path, clock) as server:
        assert not isinstance(server.runtime.agent, FallbackChain)
        endpoint = {"agent": "openai", "base_url": model.url, "key": "env:TEAM_MODEL_KEY"}
        profiles = {
            "backup": {**endpoint, "model": FALLBACK},
            "team": {**endpoint, "model": PRIMARY, "fallbacks": ["backup"]},
        }
        for name, fields in profiles.items():
            status, body = await server.call(
                "PUT", f"/v1/profiles/{name}", json_body=fields, headers=ROOT
            )
            assert status == 200, body
        bound = {"target": "identity:http:ann", "profile": "team"}
        status, body = await server.call("PUT", "/v1/bindings", json_body=bound, headers=ROOT)
        assert status == 200, body

        model.script(Error(429, "Rate limit reached", retry_after=120), Text("From the backup."))
        body = await send(server, clock, "hi")
        assert (body["status"], body["text"]) == ("done", "From the backup.")
        assert models_asked(model) == [PRIMARY, FALLBACK]
        assert [row[0] for row in await usage_rows(server.runtime)] == [FALLBACK]
        (line,) = fallback_lines(server.runtime, body["session_id"])
        assert (line["from"], line["to"], line["reason"]) == (PRIMARY, FALLBACK, "rate_limited")

        samples = await scrape(server)
        provider = f"openai@{model.url.split('/')[2]}"
        switched = sample(
            samples,
            "agenvoy_model_fallbacks_total",
            from_model=PRIMARY,
            from_provider=provider,
            to_model=FALLBACK,
            to_provider=provider,
            reason="rate_limited",
        )
        assert switched == 1

        # Anyone else still gets the default agent, with no chain.
        status, body = await server.call("POST", "/v1/send", json_body={"content": "hey"})
        assert (status, body["text"]) == (200, "echo: hey")
        assert models_asked(model) == [PRIMARY, FALLBACK]
