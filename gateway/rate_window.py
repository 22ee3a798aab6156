"""Messages a minute: the messages taken in during the last minute, per person or shared chat,
held against their `messages_per_minute` (gateway/quotas.py asks).

Alone, one instance counts in memory. Several instances share a Redis (`AGENVOY_KV_URL`):
they count there, in one sorted set per person or chat, so together they allow the limit once
rather than once each. Checking every key and counting the message in all of them is one
script, atomic on the server: two instances taking in the last allowed message at once cannot
both have it. Times are the gateway's clock's, passed in.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from redis.asyncio import Redis

MINUTE_MS = 60_000


@dataclass(frozen=True, slots=True)
class Rate:
    key: str  # a person's key or a chat's session id
    limit: int  # messages a minute; 0: none


class RateWindow(Protocol):
    async def take(
        self, rates: Sequence[Rate], now: int, message: str = ""
    ) -> tuple[Rate, int] | None:
        """Count one message against each of `rates` when it fits them all and answer None;
        else the first it does not fit, and the ms until it would (counting nothing).
        `message` names it (the platform's or the client's key): the same message taken in
        again within the minute — delivered again, sent again after a crash cut off its
        first taking in — is counted once and let through."""
        ...


class LocalWindow:
    """This instance's count, in memory."""

    def __init__(self) -> None:
        self._times: dict[str, deque[int]] = {}
        self._counted: dict[str, int] = {}  # message → when it was counted

    def _wait_ms(self, rate: Rate, now: int) -> int:
        times = self._times.get(rate.key)
        if times is None:
            return 0
        while times and times[0] <= now - MINUTE_MS:
            times.popleft()
        if not times:
            del self._times[rate.key]
            return 0
        return times[0] + MINUTE_MS - now if len(times) >= rate.limit else 0

    async def take(
        self, rates: Sequence[Rate], now: int, message: str = ""
    ) -> tuple[Rate, int] | None:
        limited = [r for r in rates if r.limit]
        if not limited:
            return None
        self._counted = {m: at for m, at in self._counted.items() if at > now - MINUTE_MS}
        if message and message in self._counted:
            return None
        for rate in limited:
            wait = self._wait_ms(rate, now)
            if wait:
                return rate, wait
        for rate in limited:
            self._times.setdefault(rate.key, deque()).append(now)
        if message:
            self._counted[message] = now
        return None


# KEYS: one sorted set per rate; ARGV: now, window, a member naming this message, then each
# key's limit. Scores are the times messages were taken in; a member counted already in the
# first set is the same message again, let through uncounted.
_TAKE = """
local now, window, member = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZSCORE', KEYS[1], member) then
  return {0, 0}
end
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  if redis.call('ZCARD', key) >= tonumber(ARGV[3 + i]) then
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return {i, tonumber(oldest[2]) + window - now}
  end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, member)
  redis.call('PEXPIRE', key, window)
end
return {0, 0}
"""


class SharedWindow:
    """The count every instance on one Redis shares."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._prefix = prefix  # the deployment's key prefix (RedisKV's)

    async def take(
        self, rates: Sequence[Rate], now: int, message: str = ""
    ) -> tuple[Rate, int] | None:
        limited = [r for r in rates if r.limit]
        if not limited:
            return None
        keys = [f"{self._prefix}rate:{r.key}" for r in limited]
        member = f"message:{message}" if message else f"{now}:{uuid.uuid4().hex}"
        args: list[str | int] = [*keys, now, MINUTE_MS, member, *(r.limit for r in limited)]
        found = await self._redis.eval(_TAKE, len(keys), *args)
        index, wait = int(found[0]), int(found[1])
        return None if index == 0 else (limited[index - 1], max(1, wait))
