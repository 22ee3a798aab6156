"""The key-value store's interface, which every backend implements.

Values are strings; callers encode structured values as JSON themselves. An expired key
behaves exactly like a missing one.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from types import TracebackType
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from gateway.rate_window import RateWindow


def check_ttl(ttl: float | None) -> None:
    if ttl is not None and (not math.isfinite(ttl) or ttl <= 0):
        raise ValueError(f"ttl must be a positive number of seconds, got {ttl!r}")


def check_value(value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"KV values are str, got {type(value).__name__}")


class KVStore(ABC):
    """String keys to string values, each optionally expiring after a TTL in seconds.

    Usable as an async context manager, which closes the store on exit.
    """

    @abstractmethod
    async def get(self, key: str) -> str | None:
        """The live value of `key`, or None if it is missing or expired."""

    @abstractmethod
    async def set(self, key: str, value: str, ttl: float | None = None) -> None:
        """Store `value` under `key`, expiring after `ttl` seconds (None: never)."""

    @abstractmethod
    async def delete(self, key: str) -> bool:
        """Remove `key`; True if a live key was removed."""

    @abstractmethod
    async def scan(self, prefix: str) -> dict[str, str]:
        """Every live key starting with `prefix` (taken literally, no wildcards) and its value."""

    def shared_window(self, namespace: str) -> RateWindow | None:
        """A messages-a-minute count every instance on this store shares (keys under
        `namespace`), if the backend can hold one; None: each instance counts alone."""
        return None

    async def keys(self, prefix: str) -> list[str]:
        """The live keys starting with `prefix`, without their values: for finding what to
        delete among keys that may hold large values (cached tool results)."""
        return sorted(await self.scan(prefix))

    @abstractmethod
    async def expire(self, key: str, ttl: float) -> bool:
        """Make a live `key` expire `ttl` seconds from now; False if it is missing or expired."""

    async def ping(self) -> None:
        """Raise unless the store answers (a readiness check). Reading a key nobody writes is
        a question every backend can answer without changing anything."""
        await self.get("health:ping")

    async def scrub(self) -> None:  # noqa: B027 - a no-op unless the backend has files
        """Leave no trace of deleted values in the store's own files (an erasure asks). A
        server keeps its files itself: nothing to do here (Redis rewrites its dump and
        append-only file on its own schedule)."""

    @abstractmethod
    async def close(self) -> None:
        """Release the connection. Calling it twice is harmless."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
