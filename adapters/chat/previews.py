"""Stream previews a crash leaves behind.

While a reply streams, a preview message stands in the chat and is edited; the final reply
deletes it. A crash in between would leave it there for good, so every live preview is noted
in the KV store (`preview:<platform>:<instance>:<task>`, kept a day) and the note is dropped
with the preview. The adapter's next start deletes the previews its previous life noted. The
instance id is in the key because instances share the KV store: one must not delete the live
previews of another.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Final

from adapters.chat.prompts import Posted
from gateway.logs import get_logger
from gateway.store.kv.base import KVStore

log = get_logger(__name__)

PREVIEW_TTL: Final = 86_400.0


class PreviewNotes:
    def __init__(self, kv: KVStore, platform: str, instance: str) -> None:
        self.kv = kv
        self.prefix = f"preview:{platform}:{instance}:"

    async def shown(self, task_hash: str, posted: Posted) -> None:
        value = json.dumps({"channel": posted.channel, "message_id": posted.message_id})
        with _quietly("note"):
            await self.kv.set(self.prefix + task_hash, value, ttl=PREVIEW_TTL)

    async def gone(self, task_hash: str) -> None:
        with _quietly("drop the note of"):
            await self.kv.delete(self.prefix + task_hash)

    async def left_behind(self) -> dict[str, Posted | None]:
        """The previews noted by an earlier life, by task; None for a note it cannot read."""
        found: dict[str, Posted | None] = {}
        for key, value in (await self.kv.scan(self.prefix)).items():
            task_hash = key.removeprefix(self.prefix)
            try:
                where = json.loads(value)
                found[task_hash] = Posted(str(where["channel"]), str(where["message_id"]))
            except (ValueError, TypeError, KeyError):
                found[task_hash] = None
        return found


@contextlib.contextmanager
def _quietly(what: str) -> Iterator[None]:
    # A note is housekeeping: a KV store that fails must not fail the reply it goes with.
    try:
        yield
    except Exception as exc:
        log.warning(f"could not {what} a stream preview", error=repr(exc))
