"""The circuit breaker of one model target, on the test's clock, and the fallback spec."""

from __future__ import annotations

import pytest
from clock import FakeClock

from gateway.agents.breaker import BreakerState, CircuitBreaker
from gateway.agents.fallback_spec import BadFallbackSpec, FallbackTarget, parse_fallbacks


def state_of(breaker: CircuitBreaker) -> BreakerState:
    """Read afresh each time (mypy would keep the first reading)."""
    return breaker.state


async def test_opens_after_k_failures_in_a_row_and_lets_one_trial_through() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(clock, failures=2, cooldown=30)
    breaker.failed()
    breaker.succeeded()  # a success in between: the count starts over
    breaker.failed()
    assert state_of(breaker) is BreakerState.closed and breaker.admit()
    breaker.failed()
    assert state_of(breaker) is BreakerState.open and not breaker.admit()
    await clock.advance(29)
    assert not breaker.admit()
    await clock.advance(1)
    assert state_of(breaker) is BreakerState.half_open
    assert breaker.admit() and not breaker.admit()  # one trial at a time
    breaker.failed()  # the trial failed: open again for a whole cool-down
    assert state_of(breaker) is BreakerState.open and breaker.seconds_left() == 30
    await clock.advance(30)
    assert breaker.admit()
    breaker.succeeded()
    assert state_of(breaker) is BreakerState.closed and breaker.opened == 2


async def test_a_longer_retry_after_keeps_it_open_longer() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(clock, failures=1, cooldown=10)
    breaker.failed(retry_after=120)
    await clock.advance(60)
    assert state_of(breaker) is BreakerState.open
    await clock.advance(60)
    assert state_of(breaker) is BreakerState.half_open


async def test_a_trial_without_verdict_lets_the_next_task_try() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(clock, failures=1, cooldown=5)
    breaker.failed()
    await clock.advance(5)
    assert breaker.admit()
    breaker.released()  # canceled
    assert breaker.admit()


def test_the_spec_reads_agent_model_url_and_key_name() -> None:
    spec = "openai:meta-llama/llama-3:free@http://h:11434/v1;key=OTHER_KEY, claude ,offline"
    assert parse_fallbacks(spec) == [
        FallbackTarget("openai", "meta-llama/llama-3:free", "http://h:11434/v1", "OTHER_KEY"),
        FallbackTarget("claude"),
        FallbackTarget("offline"),
    ]
    assert parse_fallbacks("  ") == []


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("openai,,offline", "item 2 is empty"),
        ("claude-code", "unknown agent 'claude-code'"),
        ("openai@localhost:8000", "after @ comes a base URL"),
        ("openai;key=sk-live-123", "never the key itself"),
        ("openai;token=X", "unknown option 'token'"),
        ("offline:big", "offline agent takes no model"),
    ],
)
def test_a_bad_spec_names_the_item_and_never_repeats_a_key(spec: str, named: str) -> None:
    with pytest.raises(BadFallbackSpec) as caught:
        parse_fallbacks(spec)
    assert named in str(caught.value) and "sk-live" not in str(caught.value)
