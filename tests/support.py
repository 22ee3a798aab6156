"""Helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import pytest
from patience import patient
from redis.exceptions import RedisError

from gateway.store.kv.redis import RedisKV
from gateway.store.schema import alembic_config


def worker_redis_url(base: str, worker: str) -> str:
    """`base` with the Redis database of one parallel test worker (`gw0` → 1, `gw1` → 2, …;
    `base`'s own when the tests run in one process). A gateway's presence keys carry its
    host's name and each start clears its own: two workers on one database would clear each
    other's."""
    if not worker:
        return base
    index = int(worker.removeprefix("gw")) + 1
    if index > 15:  # Redis' default configuration has databases 0-15
        raise RuntimeError(f"test worker {worker}: at most 15 workers share one Redis")
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=f"/{index}"))


REDIS_URL = worker_redis_url(
    os.environ.get("AGENVOY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    os.environ.get("PYTEST_XDIST_WORKER", ""),
)


def service_required() -> bool:
    """With AGENVOY_REQUIRE_SERVICES=1 (CI) a missing PostgreSQL/Redis fails, not skips."""
    return os.environ.get("AGENVOY_REQUIRE_SERVICES", "") not in ("", "0", "false")


def skip_or_fail(reason: str) -> NoReturn:
    if service_required():
        pytest.fail(f"required service unavailable: {reason}")
    pytest.skip(reason)


async def open_redis() -> RedisKV:
    """A RedisKV confined to a key prefix unique to the calling test."""
    prefix = f"agenvoy-test:{uuid.uuid4().hex}:"
    try:
        return await asyncio.wait_for(RedisKV.from_url(REDIS_URL, key_prefix=prefix), 5)
    except (OSError, RedisError, TimeoutError) as exc:
        skip_or_fail(f"Redis at {REDIS_URL} unreachable: {exc!r}")


async def wipe_redis(kv: RedisKV) -> None:
    for key in await kv.scan(""):
        await kv.delete(key)


async def wait_until(check: Callable[[], Awaitable[bool]], within: float = 5.0) -> bool:
    """Poll `check` until it is true or `within` seconds (stretched in parallel workers:
    tests/patience.py) pass; returns its last answer."""
    within = patient(within)

    async def poll() -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if await check():
                return True
            await asyncio.sleep(0.02)
        return await check()

    return await asyncio.wait_for(poll(), within + 1)


def head_revision() -> str:
    """The newest migration's revision id: what a migrated database must be at."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the migrations have no head"
    return head
