"""What the model agents share about retrying a call to their API: the failures worth another
try, how long the server asked to wait, and the wait between tries."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from tenacity import RetryCallState

MAX_WAIT_SECONDS: Final = 60.0  # a longer retry-after is cut to this


class Retryable(Exception):
    """A failure that may pass: a 429 or 5xx, a lost connection, a stream cut short."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The seconds a `Retry-After` header asks for (aiohttp's headers ignore case); None when
    there is none or it is not a number of seconds."""
    try:
        return max(0.0, float(headers.get("Retry-After", "")))
    except ValueError:
        return None


def wait_for_server(backoff: Callable[[RetryCallState], Any]) -> Callable[[RetryCallState], float]:
    """A tenacity wait: what the server asked for, when it asked; `backoff` otherwise."""

    def wait(state: RetryCallState) -> float:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, Retryable) and exc.retry_after is not None:
            return min(exc.retry_after, MAX_WAIT_SECONDS)
        return float(backoff(state))

    return wait
