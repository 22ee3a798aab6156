"""The KV store on a Redis server, for instances spread over several machines.

Expiry is Redis's own (PX / PEXPIRE), so every instance agrees on it whatever its clock.
"""

from __future__ import annotations

import math
from typing import Final

import redis.asyncio as aioredis

from gateway.rate_window import RateWindow, SharedWindow
from gateway.store.kv.base import KVStore, check_ttl, check_value

_SCAN_BATCH: Final = 500


def _glob_escape(text: str) -> str:
    """Escape Redis glob metacharacters so `text` matches only itself."""
    out = []
    for char in text:
        if char in "\\*?[]^":
            out.append("\\")
        out.append(char)
    return "".join(out)


def _text(value: bytes | str | None) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value


def _millis(ttl: float) -> int:
    return max(1, math.ceil(ttl * 1000))


class RedisKV(KVStore):
    """A KV store on a Redis server.

    `key_prefix` is prepended to every key on the server and hidden from callers, so several
    deployments (or test runs) can share one Redis database.
    """

    def __init__(self, client: aioredis.Redis, *, key_prefix: str = "") -> None:
        self._redis = client
        self._prefix = key_prefix
        self._closed = False

    def shared_window(self, namespace: str) -> RateWindow:
        return SharedWindow(self._redis, f"{self._prefix}{namespace}")

    @classmethod
    async def from_url(cls, url: str, *, key_prefix: str = "") -> RedisKV:
        client = aioredis.Redis.from_url(url, decode_responses=True)
        try:
            await client.ping()
        except BaseException:
            await client.aclose()
            raise
        return cls(client, key_prefix=key_prefix)

    async def get(self, key: str) -> str | None:
        return _text(await self._redis.get(self._prefix + key))

    async def set(self, key: str, value: str, ttl: float | None = None) -> None:
        check_ttl(ttl)
        check_value(value)
        if ttl is None:
            await self._redis.set(self._prefix + key, value)
        else:
            await self._redis.set(self._prefix + key, value, px=_millis(ttl))

    async def delete(self, key: str) -> bool:
        removed: int = await self._redis.delete(self._prefix + key)
        return removed > 0

    async def _full_keys(self, prefix: str) -> list[str]:
        pattern = _glob_escape(self._prefix + prefix) + "*"
        keys: set[str] = set()  # SCAN may return a key more than once
        async for key in self._redis.scan_iter(match=pattern, count=_SCAN_BATCH):
            text = _text(key)
            if text is not None:
                keys.add(text)
        return sorted(keys)

    async def keys(self, prefix: str) -> list[str]:
        return [key[len(self._prefix) :] for key in await self._full_keys(prefix)]

    async def scan(self, prefix: str) -> dict[str, str]:
        found: dict[str, str] = {}
        unique = await self._full_keys(prefix)
        for start in range(0, len(unique), _SCAN_BATCH):
            batch = unique[start : start + _SCAN_BATCH]
            values = await self._redis.mget(batch)
            for key, raw in zip(batch, values, strict=True):
                value = _text(raw)
                if value is not None:  # expired between SCAN and MGET
                    found[key[len(self._prefix) :]] = value
        return found

    async def expire(self, key: str, ttl: float) -> bool:
        check_ttl(ttl)
        changed: bool = await self._redis.pexpire(self._prefix + key, _millis(ttl))
        return bool(changed)

    async def ping(self) -> None:
        if self._closed:  # the client would quietly connect again
            raise RuntimeError("KV store is closed")
        await self._redis.ping()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._redis.aclose()
