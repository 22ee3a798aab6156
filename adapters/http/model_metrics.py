"""The model targets' metrics (`ModelStats`: the fallback chains' targets, and the model
agents that answer alone): tokens, calls and their time, failed calls by kind (429s are
`kind="rate_limited"`), switches to a fallback, and each breaker's state (a lone agent has
none). Labels are configured model and provider names only."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from gateway.agents.model_stats import ModelStats

LABELS = ["model", "provider"]


class ModelCollector(Collector):
    def __init__(self, stats: ModelStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        targets = sorted(self._stats.targets.items(), key=lambda t: (t[0].provider, t[0].model))
        tokens = CounterMetricFamily(
            "agenvoy_model_tokens",
            "Tokens of model calls that answered, by model, provider and direction.",
            labels=[*LABELS, "direction"],
        )
        seconds = SummaryMetricFamily(
            "agenvoy_model_call_seconds",
            "Model calls that answered and the time they took, by model and provider.",
            labels=LABELS,
        )
        errors = CounterMetricFamily(
            "agenvoy_model_errors",
            "Failed model call attempts by kind (rate_limited is a 429), by model and provider.",
            labels=[*LABELS, "kind"],
        )
        for label, stats in targets:
            names = [label.model, label.provider]
            tokens.add_metric([*names, "input"], stats.input_tokens)
            tokens.add_metric([*names, "output"], stats.output_tokens)
            seconds.add_metric(names, count_value=stats.calls, sum_value=stats.seconds)
            for kind, count in sorted(stats.errors.items()):
                errors.add_metric([*names, kind], count)
        yield tokens
        yield seconds
        yield errors
        fallbacks = CounterMetricFamily(
            "agenvoy_model_fallbacks",
            "Tasks that went on with another model, by the model left, the one taken and why.",
            labels=["from_model", "from_provider", "to_model", "to_provider", "reason"],
        )
        for (before, after, why), count in sorted(
            self._stats.fallbacks.items(), key=lambda f: (str(f[0][0]), str(f[0][1]), f[0][2])
        ):
            fallbacks.add_metric(
                [before.model, before.provider, after.model, after.provider, why], count
            )
        yield fallbacks
        state = GaugeMetricFamily(
            "agenvoy_model_breaker_state",
            "Each model target's circuit breaker: 0 closed, 1 half-open, 2 open (skipped).",
            labels=LABELS,
        )
        opened = CounterMetricFamily(
            "agenvoy_model_breaker_opened",
            "Times each model target's breaker opened.",
            labels=LABELS,
        )
        for label, breaker_state, times in self._stats.breakers():
            state.add_metric([label.model, label.provider], int(breaker_state))
            opened.add_metric([label.model, label.provider], times)
        yield state
        yield opened
