"""A circuit breaker for one model target: after `failures` provider failures in a row it
is open — the fallback chain skips the target — for `cooldown` seconds (longer when the
provider's Retry-After asked for more); then half-open: one task tries it again while others
still skip it. A success closes it; a failure opens it again for another cool-down."""

from __future__ import annotations

from enum import IntEnum

from gateway.clock import Clock


class BreakerState(IntEnum):
    """As /metrics shows it (a gauge): 0 closed, 1 half-open, 2 open."""

    closed = 0
    half_open = 1
    open = 2


class CircuitBreaker:
    def __init__(self, clock: Clock, failures: int, cooldown: float) -> None:
        if failures < 1 or cooldown <= 0:
            raise ValueError("a breaker needs failures >= 1 and a positive cool-down")
        self.clock = clock
        self.failures = failures
        self.cooldown = cooldown
        self.in_a_row = 0
        self.opened = 0  # times it opened, for /metrics
        self._open_until: float | None = None  # monotonic seconds; None while closed
        self._trial = False  # a half-open trial is running

    @property
    def state(self) -> BreakerState:
        if self._open_until is None:
            return BreakerState.closed
        if self.clock.monotonic() >= self._open_until:
            return BreakerState.half_open
        return BreakerState.open

    def seconds_left(self) -> float:
        """How long it stays open (0 when it is not)."""
        if self._open_until is None:
            return 0.0
        return max(0.0, self._open_until - self.clock.monotonic())

    def admit(self) -> bool:
        """Whether a task may try the target now; in half-open, only the first asker does
        (until it reports back)."""
        state = self.state
        if state is BreakerState.closed:
            return True
        if state is BreakerState.open or self._trial:
            return False
        self._trial = True
        return True

    def succeeded(self) -> None:
        self.in_a_row = 0
        self._open_until = None
        self._trial = False

    def failed(self, retry_after: float | None = None) -> None:
        """A provider failure; opens the breaker at the K-th in a row, or at once when a
        half-open trial failed."""
        self.in_a_row += 1
        if self._trial or self.in_a_row >= self.failures:
            wait = max(self.cooldown, retry_after or 0.0)
            self._open_until = self.clock.monotonic() + wait
            self.opened += 1
        self._trial = False

    def released(self) -> None:
        """A trial that ended without a verdict (the task was canceled, or failed for another
        reason than the provider): the next task may try."""
        self._trial = False
