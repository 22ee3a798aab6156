"""What the model agents share about retrying a call to their API: the failures worth another
try, how long the server asked to wait, the wait between tries, and how a provider's failure
is handed on (`ProviderFailed`) once the agent's own tries are spent."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import aiohttp
from tenacity import RetryCallState

from gateway.agents.base import AgentFailed

MAX_WAIT_SECONDS: Final = 60.0  # a longer retry-after is cut to this

# Why a provider failed, as the fallback layer and /metrics name it (a bounded set).
FailureKind = Literal[
    "rate_limited", "quota", "server_error", "overloaded", "timeout", "unreachable"
]
FAILURE_KINDS: Final[tuple[FailureKind, ...]] = (
    "rate_limited",
    "quota",
    "server_error",
    "overloaded",
    "timeout",
    "unreachable",
)


class Retryable(Exception):
    """A failure that may pass: a 429 or 5xx, a lost connection, a stream cut short."""

    def __init__(
        self,
        message: str,
        retry_after: float | None = None,
        kind: FailureKind = "server_error",
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.kind: FailureKind = kind

    def failed(self) -> ProviderFailed:
        """What the agent raises once it stops trying."""
        return ProviderFailed(
            self.kind, f"the model is not available right now ({self})", self.retry_after
        )


class ProviderFailed(AgentFailed):
    """The provider could not answer (rate limit, quota, server error, overload, timeout,
    unreachable), as opposed to refusing the request: another model may answer instead. Its
    message is still shown to the user when there is no other model."""

    def __init__(self, kind: FailureKind, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind
        self.retry_after = retry_after


def status_kind(status: int) -> FailureKind:
    """The failure an HTTP status worth another try means."""
    if status == 429:
        return "rate_limited"
    if status == 529:
        return "overloaded"
    if status == 408:
        return "timeout"
    return "server_error"


def lost_kind(exc: BaseException) -> FailureKind:
    """What a call lost to a broken connection or a silence means: an answer cut short came
    from a server that was reached."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "server_error" if isinstance(exc, aiohttp.ClientPayloadError) else "unreachable"


def failure_kind(status: int, body: str) -> FailureKind:
    """What an OpenAI-style error answer worth another try means. A 429 that says the
    account's quota is spent (`insufficient_quota`) is no rate limit: waiting does not help,
    another provider may."""
    if status == 429:
        try:
            error = json.loads(body).get("error") or {}
        except (ValueError, AttributeError):
            error = {}
        if isinstance(error, dict) and "insufficient_quota" in (
            error.get("code"),
            error.get("type"),
        ):
            return "quota"
    return status_kind(status)


@dataclass(frozen=True)
class RetryPolicy:
    """How a model agent retries one call.

    Alone, it tries `attempts` times and waits what the server asks (cut to `longest_wait`).
    In a fallback chain (`switch_on_long_wait`), a server asking for more than `longest_wait`
    seconds ends the tries at once, so the next model answers instead of the user waiting.
    `seen` hears of every failed attempt, retried or not (the metrics count 429s there)."""

    attempts: int = 4
    longest_wait: float = MAX_WAIT_SECONDS
    switch_on_long_wait: bool = False
    seen: Callable[[Retryable], None] | None = None

    def stop(self, state: RetryCallState) -> bool:
        exc = _failure(state)
        if self.seen is not None and isinstance(exc, Retryable):
            self.seen(exc)
        if state.attempt_number >= self.attempts:
            return True
        if isinstance(exc, Retryable) and exc.kind == "quota":
            return True  # spent until the provider's billing changes: no wait helps
        waits_long = (
            isinstance(exc, Retryable)
            and exc.retry_after is not None
            and exc.retry_after > self.longest_wait
        )
        return self.switch_on_long_wait and waits_long


ALONE: Final = RetryPolicy()
# In a chain: one more try after a short wait, then the next model.
IN_CHAIN: Final = RetryPolicy(attempts=2, longest_wait=5.0, switch_on_long_wait=True)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The seconds a `Retry-After` header asks for (aiohttp's headers ignore case); None when
    there is none or it is not a number of seconds."""
    try:
        return max(0.0, float(headers.get("Retry-After", "")))
    except ValueError:
        return None


def _failure(state: RetryCallState) -> BaseException | None:
    outcome = state.outcome
    return outcome.exception() if outcome is not None else None


def wait_for_server(
    backoff: Callable[[RetryCallState], Any], longest: float = MAX_WAIT_SECONDS
) -> Callable[[RetryCallState], float]:
    """A tenacity wait: what the server asked for, when it asked (at most `longest`);
    `backoff` otherwise."""

    def wait(state: RetryCallState) -> float:
        exc = _failure(state)
        if isinstance(exc, Retryable) and exc.retry_after is not None:
            return min(exc.retry_after, longest)
        return float(backoff(state))

    return wait
