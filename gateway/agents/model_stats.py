"""What the model targets did, counted in this process for /metrics: tokens, calls and
their time, failures by kind, switches from one model to another, and each breaker's state.
The targets are a fallback chain's, and the model agents that answer alone (`counted.py`),
which have no breaker.

Labels are the configured names of a target (its model and `provider`, `kind@host`), never
a session's override or an id: their number stays that of the configured targets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gateway.agents.base import Usage
from gateway.agents.breaker import BreakerState, CircuitBreaker
from gateway.agents.retries import FailureKind, Retryable
from gateway.clock import Clock


@dataclass(frozen=True)
class TargetLabel:
    """How /metrics and action.log name one model target."""

    model: str
    provider: str  # `<agent kind>@<host>` (`openai@api.openai.com`), or the agent kind

    @classmethod
    def of(cls, kind: str, model: str, base_url: str = "") -> TargetLabel:
        host = urlsplit(base_url).netloc if base_url else ""
        return cls(model or kind, f"{kind}@{host}" if host else kind)

    def __str__(self) -> str:
        return f"{self.model} ({self.provider})"


@dataclass
class TargetStats:
    breaker: CircuitBreaker | None = None
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    errors: Counter[FailureKind] = field(default_factory=Counter)


class ModelStats:
    def __init__(self) -> None:
        self.targets: dict[TargetLabel, TargetStats] = {}
        # (from model, to model, why) -> switches
        self.fallbacks: Counter[tuple[TargetLabel, TargetLabel, FailureKind]] = Counter()

    def target(self, label: TargetLabel, breaker: CircuitBreaker | None = None) -> TargetStats:
        stats = self.targets.setdefault(label, TargetStats())
        if breaker is not None:
            stats.breaker = breaker
        return stats

    def breaker(
        self, label: TargetLabel, clock: Clock, failures: int, cooldown: float
    ) -> CircuitBreaker:
        """The target's breaker, made at its first use: one per target, whichever chains
        (profiles) use it."""
        stats = self.target(label)
        if stats.breaker is None:
            stats.breaker = CircuitBreaker(clock, failures, cooldown)
        return stats.breaker

    def seen(self, label: TargetLabel) -> Callable[[Retryable], None]:
        """The hook a target's retry policy calls for each failed attempt."""
        stats = self.target(label)

        def count(failure: Retryable) -> None:
            stats.errors[failure.kind] += 1

        return count

    def usage(self, label: TargetLabel, usage: Usage) -> None:
        stats = self.target(label)
        stats.calls += 1
        stats.input_tokens += usage.input
        stats.output_tokens += usage.output
        stats.seconds += usage.elapsed_ms / 1000

    def switched(self, before: TargetLabel, after: TargetLabel, why: FailureKind) -> None:
        self.fallbacks[(before, after, why)] += 1

    def breakers(self) -> Iterator[tuple[TargetLabel, BreakerState, int]]:
        for label, stats in self.targets.items():
            if stats.breaker is not None:
                yield label, stats.breaker.state, stats.breaker.opened
