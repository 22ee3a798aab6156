"""The default agent's fallback chain, from the settings: the configured agent first, then
each `AGENVOY_FALLBACK` target, every one with its own breaker and a retry policy that hands
over soon (`retries.IN_CHAIN`).

A target's agent is made by the caller's `make` (the composition root's builder) from a copy
of the settings that points at the target: its model, endpoint and key.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import SecretStr

from gateway.agents.base import Agent
from gateway.agents.fallback import FallbackChain, build_chain
from gateway.agents.fallback_spec import BadFallbackSpec, FallbackTarget, parse_fallbacks
from gateway.agents.model_stats import ModelStats, TargetLabel
from gateway.agents.retries import IN_CHAIN, RetryPolicy
from gateway.clock import Clock
from gateway.settings import Settings

MakeAgent = Callable[[Settings, RetryPolicy], Agent]


def target_settings(
    settings: Settings, target: FallbackTarget, environ: Mapping[str, str]
) -> Settings:
    """`settings` as the target's agent needs them."""
    update: dict[str, Any] = {"agent": target.agent}
    model_field, url_field, key_field = (
        ("anthropic_model", "anthropic_base_url", "anthropic_api_key")
        if target.agent == "claude"
        else ("model", "openai_base_url", "openai_api_key")
    )
    if target.model:
        update[model_field] = target.model
    if target.base_url:
        update[url_field] = target.base_url
        update[key_field] = None  # the configured key is for the configured endpoint only
    if target.key_env:
        key = environ.get(target.key_env, "")
        if not key:
            raise BadFallbackSpec(
                f"AGENVOY_FALLBACK: the variable {target.key_env} named for "
                f"{target.agent}:{target.model or '(default model)'}'s key is not set"
            )
        update[key_field] = SecretStr(key)
    return settings.model_copy(update=update)


def label_of(settings: Settings) -> TargetLabel:
    """How the agent these settings make is named in /metrics and action.log."""
    if settings.agent == "claude":
        return TargetLabel.of("claude", settings.anthropic_model, settings.anthropic_base_url)
    if settings.agent == "openai":
        return TargetLabel.of("openai", settings.model, settings.openai_base_url)
    return TargetLabel.of(settings.agent, "" if settings.agent == "offline" else settings.model)


def default_chain(
    settings: Settings,
    clock: Clock,
    make: MakeAgent,
    environ: Mapping[str, str] | None = None,
) -> FallbackChain:
    """The configured agent and its fallbacks; `BadFallbackSpec` names what is wrong."""
    targets = parse_fallbacks(settings.fallback)
    environ = os.environ if environ is None else environ
    stats = ModelStats()

    every = [settings, *(target_settings(settings, t, environ) for t in targets)]
    labels = [label_of(of) for of in every]
    agents = [make(of, chain_policy(stats, label)) for of, label in zip(every, labels, strict=True)]
    return build_chain(
        agents[0],
        agents[1:],
        labels=labels,
        clock=clock,
        stats=stats,
        breaker_failures=settings.breaker_failures,
        breaker_cooldown=settings.breaker_cooldown_seconds,
    )


def chain_policy(stats: ModelStats, label: TargetLabel) -> RetryPolicy:
    """How an agent of a chain retries: briefly (`IN_CHAIN`), its failures counted."""
    return RetryPolicy(
        IN_CHAIN.attempts, IN_CHAIN.longest_wait, IN_CHAIN.switch_on_long_wait, stats.seen(label)
    )
