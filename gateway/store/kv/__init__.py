"""A small async key-value store with per-key expiry.

Two backends share one interface, `KVStore` (in `base`):

* `SqliteKV` (`sqlite`) - one SQLite file in WAL mode; several processes on one machine can
  share it.
* `RedisKV` (`redis`) - a Redis server, for instances spread over several machines.

`open_kv` picks the backend from a URL (`sqlite:///...`, `redis://...`, `rediss://...`).
"""

from __future__ import annotations

from typing import Final

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.settings import mask_url
from gateway.store.kv.base import KVStore
from gateway.store.kv.sqlite import SqliteKV, sqlite_path_from_url

__all__ = [
    "ERROR_MEMORY_PREFIX",
    "TOOL_CACHE_PREFIX",
    "KVStore",
    "SqliteKV",
    "open_kv",
    "sqlite_path_from_url",
]

# Key spaces the session layout reserves for a session's tool cache and error memory
# (`<prefix><session_id>:…`); reaping a session clears them.
TOOL_CACHE_PREFIX: Final = "toolcache:"
ERROR_MEMORY_PREFIX: Final = "errmem:"


async def open_kv(url: str, *, clock: Clock = SYSTEM_CLOCK) -> KVStore:
    """Open the store a URL names: `sqlite:///<path>`, `redis://...` or `rediss://...`.

    `clock` times the embedded store's expiry; Redis keeps time on the server.
    """
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme == "sqlite":
        return await SqliteKV.open(sqlite_path_from_url(url), clock=clock)
    if scheme in ("redis", "rediss"):
        # Imported here: a gateway without Redis never loads its client library.
        from gateway.store.kv.redis import RedisKV

        return await RedisKV.from_url(url)
    raise ValueError(
        f"unsupported KV URL {mask_url(url)!r}: expected sqlite:///<path to file>, "
        "redis://host[:port][/db] or rediss://host[:port][/db]"
    )
