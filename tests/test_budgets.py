"""Budgets held during a run and in money: a tool loop stops at the requester's budget before
its next model call (the fake model, over HTTP), a price table turns usage into dollars held
against `cost_day`, kept on each row so that a later price change rewrites nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from fakes.anthropic import FakeAnthropic, ToolUse
from fakes.anthropic import Text as ClaudeText
from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text, ToolCalls
from test_http import bearer, serving
from typer.testing import CliRunner

from gateway.cli import app as cli_app
from gateway.events import Inbound, Origin
from gateway.prices import PriceTableError, parse_prices
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.usage import UsageRecord

# 20 tokens a call: the budget of 50 holds two calls and a half.
TWENTY = {"prompt_tokens": 15, "completion_tokens": 5}


def now_call(n: int) -> ToolCalls:
    return ToolCalls([(f"c{n}", "current_time", {})], usage=TWENTY)


async def test_a_tool_loop_stops_at_the_budget_before_its_next_model_call(
    tmp_path: Path, model: FakeOpenAI, clock: FakeClock
) -> None:
    options: dict[str, Any] = model.agent_settings()
    async with serving(tmp_path, clock, quota_tokens_day=50, **options) as server:
        model.script(now_call(1), now_call(2), now_call(3), Text("never said", usage=TWENTY))
        status, body = await server.call("POST", "/v1/send", json_body={"content": "loop"})
        assert status == 200
        # The third call would have gone past the budget: it was never made.
        assert len(model.requests) == 3
        assert body["status"] == "done" and body["error"] == ""
        assert body["text"] == "daily budget of 50 tokens used; resets 00:00 UTC"
        store = server.runtime.store
        session_id = body["session_id"]
        # Every tool the run started finished; the run is recorded as answered, audited.
        run = await store.finished_run(session_id, body["task_hash"])
        assert run is not None and run["reply"] == body["text"]
        log = (store.files(session_id).dir / "action.log").read_text()
        assert log.count("[tool_result]") == 3 and "daily budget of 50 tokens" in log
        spent = await store.usage.spent(since_ms=0, identities={"http:tester"})
        assert spent.tokens == 60
        # The next message is refused at intake, as before.
        status, body = await server.call("POST", "/v1/send", json_body={"content": "more"})
        assert (status, body["error"]["code"]) == (429, "budget_exceeded")
        # A gateway admin is exempt during a run as at intake.
        model.reset()
        model.script(now_call(4), now_call(5), now_call(6), Text("admin answer", usage=TWENTY))
        root = bearer("root")
        status, body = await server.call(
            "POST", "/v1/send", json_body={"content": "loop"}, headers=root
        )
        assert (status, body["text"]) == (200, "admin answer")


async def test_a_budget_stops_a_subagent_s_loop(
    tmp_path: Path, model: FakeOpenAI, clock: FakeClock
) -> None:
    """A subagent spends its parent's requester's budget, and is stopped the same way."""
    options: dict[str, Any] = model.agent_settings()
    async with serving(
        tmp_path, clock, quota_tokens_day=50, max_subagent_depth=1, **options
    ) as server:
        model.script(
            ToolCalls([("d1", "delegate", {"task": "count"})], usage=TWENTY),
            now_call(1),  # the subagent's first call: 40 spent
            now_call(2),  # its second: 60
            Text("the subagent never answers", usage=TWENTY),
            Text("nor its parent", usage=TWENTY),
        )
        status, body = await server.call("POST", "/v1/send", json_body={"content": "go"})
        assert status == 200
        assert len(model.requests) == 3
        assert (body["status"], body["text"]) == (
            "done",
            "daily budget of 50 tokens used; resets 00:00 UTC",
        )
        spent = await server.runtime.store.usage.spent(since_ms=0, identities={"http:tester"})
        assert spent.tokens == 60  # the subagent's calls are written as they are made


PRICES = """
"fake-*" = { input = 10000, output = 20000 }  # a cent a token in, two out
"cheap" = { input = 0.5, output = 1.5, cache_read = 0.05 }
"""


async def test_money_budgets_by_the_price_table_and_history_kept(
    tmp_path: Path, model: FakeOpenAI, clock: FakeClock
) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    options: dict[str, Any] = model.agent_settings()
    async with serving(tmp_path, clock, quota_cost_day=2, prices=prices, **options) as server:
        model.script(Text("dear answer", usage={"prompt_tokens": 100, "completion_tokens": 50}))
        status, body = await server.call("POST", "/v1/send", json_body={"content": "q"})
        assert (status, body["text"]) == (200, "dear answer")
        status, body = await server.call("POST", "/v1/send", json_body={"content": "again"})
        assert status == 429
        assert body["error"] == {
            "code": "budget_exceeded",
            "message": "daily budget of $2.00 used; resets 00:00 UTC",
        } | {k: v for k, v in body["error"].items() if k not in ("code", "message")}
        status, body = await server.call("GET", "/v1/usage")
        assert body["models"][0]["cost"] == pytest.approx(2.0)
        status, body = await server.call("GET", "/v1/usage?by=identity")
        assert body["identities"][0]["cost"] == pytest.approx(2.0)
    # Prices double: what was spent stays what it cost then.
    prices.write_text(PRICES.replace("10000", "20000"))
    async with serving(tmp_path, clock, prices=prices, **options) as server:
        status, body = await server.call("GET", "/v1/usage")
        assert body["models"][0]["cost"] == pytest.approx(2.0)


async def test_a_model_the_table_does_not_name_costs_nothing_and_is_counted(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"cheap": {"input": 1}}')
    options: dict[str, Any] = model.agent_settings("unlisted-model")
    async with serving(tmp_path, quota_cost_day=0.01, prices=prices, **options) as server:
        for n in range(2):
            model.script(Text(f"free {n}", usage={"prompt_tokens": 10**6}))
            status, body = await server.call("POST", "/v1/send", json_body={"content": "q"})
            assert (status, body["text"]) == (200, f"free {n}")  # never over a $0.01 budget
        async with server.client.get(server.url("/metrics")) as resp:
            metrics = await resp.text()
        assert "agenvoy_model_calls_unpriced_total 2.0" in metrics
        status, body = await server.call("GET", "/v1/usage")
        assert body["models"][0]["cost"] == 0.0


async def test_a_bad_price_table_stops_the_start_naming_the_entry(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('"gpt-4o" = { input = 2.5, ouput = 10 }\n')
    settings = Settings(home=tmp_path / "home", _env_file=None, prices=prices)
    with pytest.raises(PriceTableError, match=r"entry 'gpt-4o' has unknown key\(s\) ouput"):
        await Runtime.start(settings)
    for text, says in [
        ('"m" = { input = -1 }', "entry 'm': input must be a number of dollars ≥ 0"),
        ('"m" = 3', "entry 'm' must be a table of prices"),
        ("m = {", "not valid TOML"),
        ("", "names no model"),
    ]:
        with pytest.raises(PriceTableError, match=says):
            parse_prices(text, "p.toml")


def test_a_call_s_cost_prices_cache_reads_apart() -> None:
    table = parse_prices(PRICES, "p.toml")
    counters: dict[str, int] = {}
    # OpenAI-style: the 1,000,000 input tokens hold 400,000 read from the cache.
    row = UsageRecord("cli-a", "cheap", input=10**6, output=10**6, cache_read=400_000)
    assert table.priced(row, counters).cost == pytest.approx(0.3 + 1.5 + 0.02)
    # Anthropic-style: cache reads are apart from the input.
    apart = table.priced(row, counters, reads_in_input=False).cost
    assert apart == pytest.approx(0.5 + 1.5 + 0.02)
    assert table.of("fake-model") is not None and table.of("other") is None
    assert counters == {}


async def test_money_budgets_set_from_the_command_line_and_shown(
    tmp_path: Path, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    monkeypatch.setenv("AGENVOY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AGENVOY_PRICES", str(prices))
    runner = CliRunner()

    async def cli(*args: str) -> tuple[int, str]:
        result = await asyncio.to_thread(runner.invoke, cli_app, list(args))
        return result.exit_code, result.output

    assert await cli("quota", "set", "http:tester", "cost_day=1.5", "cost_month=$40") == (
        0,
        "http:tester: cost_day=1.50 cost_month=40.00\n",
    )
    assert (await cli("quota", "set", "http:tester", "cost_day=lots"))[0] == 2
    assert (await cli("quota", "set", "tg-5", "cost_day=-1"))[0] == 2
    options: dict[str, Any] = model.agent_settings()
    async with serving(tmp_path, prices=prices, **options) as server:
        model.script(Text("dear answer", usage={"prompt_tokens": 100, "completion_tokens": 50}))
        status, body = await server.call("POST", "/v1/send", json_body={"content": "q"})
        assert (status, body["text"]) == (200, "dear answer")
        status, body = await server.call("POST", "/v1/send", json_body={"content": "more"})
        assert (status, body["error"]["message"]) == (
            429,
            "daily budget of $1.50 used; resets 00:00 UTC",
        )
        status, body = await server.call("POST", "/v1/send", json_body={"content": "/usage me"})
        assert status == 200
        assert "spent today: $2.00 of $1.50" in body["text"]
        assert "spent this month: $2.00 of $40.00" in body["text"]
    code, out = await cli("usage", "--by", "identity")
    assert code == 0 and "cost $" in out
    assert out.splitlines()[1].split() == ["http:tester", "1", "100", "50", "2.0000"]


async def test_the_claude_agent_asks_before_each_model_call_too(tmp_path: Path) -> None:
    async with FakeAnthropic() as fake:
        settings = Settings(
            home=tmp_path / "home",
            _env_file=None,
            agent="claude",
            anthropic_base_url=fake.url,
            anthropic_api_key=fake.api_key,
            anthropic_model="claude-test",
            quota_tokens_day=1,
        )
        runtime = await Runtime.start(settings)
        try:
            fake.script(ToolUse([("toolu_a", "current_time", {})]), ClaudeText("never said"))
            ann = Origin("http", sender_id="ann", sender_name="Ann")
            submitted = await runtime.router.submit(Inbound(ann, "cli-c", "what time is it?"))
            state = await runtime.router.wait(submitted.task_hash, 15)
            assert state.reply == "daily budget of 1 tokens used; resets 00:00 UTC"
            assert len(fake.requests) == 1
        finally:
            await runtime.close()


async def test_a_profiles_budget_per_member_stops_its_tasks_only(
    tmp_path: Path, model: FakeOpenAI, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile's `tokens_day` holds each member's spend in the tasks it answers; the same
    member elsewhere, and another member there, go on."""
    monkeypatch.setenv("TEAM_MODEL_KEY", model.api_key)
    options: dict[str, Any] = model.agent_settings()
    async with serving(tmp_path, clock, **options) as server:
        team = {
            "agent": "openai",
            "base_url": model.url,
            "key": "env:TEAM_MODEL_KEY",
            "budgets": {"tokens_day": 30},
        }
        root = bearer("root")
        status, body = await server.call("PUT", "/v1/profiles/team", json_body=team, headers=root)
        assert status == 200 and body["fields"]["budgets"] == {"tokens_day": 30}, body
        bound = {"target": "prefix:chat", "profile": "team"}
        status, body = await server.call("PUT", "/v1/bindings", json_body=bound, headers=root)
        assert status == 200, body

        async def send(who: str, session_id: str) -> dict[str, Any]:
            status, body = await server.call(
                "POST",
                "/v1/send",
                json_body={"content": "hi", "session_id": session_id},
                headers=bearer(who),
            )
            assert status == 200, body
            reply: dict[str, Any] = body
            return reply

        model.script(Text("one", usage=TWENTY), Text("two", usage=TWENTY))
        assert (await send("ann", "chat-ann"))["text"] == "one"  # 20 spent: under 30
        assert (await send("ann", "chat-ann"))["text"] == "two"  # 40 spent
        said = (await send("ann", "chat-ann"))["text"]
        assert said == "this agent's daily budget of 30 tokens used; resets 00:00 UTC"
        assert len(model.requests) == 2  # stopped before its model call
        # The same member where the profile does not answer; another member where it does.
        model.script(Text("elsewhere", usage=TWENTY), Text("bob's", usage=TWENTY))
        assert (await send("ann", "cli-ann"))["text"] == "elsewhere"
        assert (await send("bob", "chat-bob"))["text"] == "bob's"

        status, body = await server.call(
            "PUT", "/v1/profiles/team", json_body={"budgets": {"cost_day": 5}}, headers=root
        )
        assert status == 400 and "tokens_day, tokens_month" in body["error"]["message"]
