"""At most once every so many seconds, per key, on the runtime's clock (so tests move time)."""

from __future__ import annotations

from gateway.clock import Clock


class Throttle:
    def __init__(self, clock: Clock, every: float) -> None:
        self.clock = clock
        self.every = every
        self._at: dict[str, float] = {}

    def ready(self, key: str) -> bool:
        """True (and the time noted) when `key` last happened `every` seconds ago or never."""
        now = self.clock.monotonic()
        last = self._at.get(key)
        if last is not None and now - last < self.every:
            return False
        self._at[key] = now
        return True

    def forget(self, key: str) -> None:
        self._at.pop(key, None)
