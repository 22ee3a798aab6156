"""One asyncio lock per key (a session id), kept only while someone holds or waits for it:
a gateway that has seen a million sessions keeps no lock for the idle ones."""

from __future__ import annotations

import asyncio
from types import TracebackType


class KeyedLocks:
    def __init__(self) -> None:
        # The lock of each key in use, and how many hold or wait for it.
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def hold(self, key: str) -> _Held:
        """`async with locks.hold(key):` one holder of `key` at a time."""
        return _Held(self._locks, key)

    def __len__(self) -> int:
        """How many keys are in use."""
        return len(self._locks)


class _Held:
    """The context of one `hold` (a class rather than a generator: it is entered several times
    per message, and a generator-based context costs several times as much)."""

    __slots__ = ("_key", "_lock", "_locks")

    def __init__(self, locks: dict[str, tuple[asyncio.Lock, int]], key: str) -> None:
        self._locks = locks
        self._key = key
        self._lock: asyncio.Lock | None = None

    async def __aenter__(self) -> None:
        found = self._locks.get(self._key)
        lock, users = found if found is not None else (asyncio.Lock(), 0)
        self._locks[self._key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:
            self._leave()
            raise
        self._lock = lock

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        assert self._lock is not None
        self._lock.release()
        self._leave()

    def _leave(self) -> None:
        lock, users = self._locks[self._key]
        if users == 1:
            del self._locks[self._key]
        else:
            self._locks[self._key] = (lock, users - 1)
