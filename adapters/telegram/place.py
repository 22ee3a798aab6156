"""Where a Telegram message goes: a chat, a forum topic in it, and groups that moved.

A group that becomes a supergroup gets a new chat id. Its session (history, settings) moves to
the new id, and the old id is kept in the KV store as an alias, so a send to the old chat,
also after a restart, goes to the new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gateway.events import Origin
from gateway.ids import telegram_session_id
from gateway.logs import get_logger
from gateway.runtime import Runtime

log = get_logger(__name__)

ALIAS_PREFIX: Final = "tgalias:"


@dataclass(frozen=True, slots=True)
class Place:
    """Where to answer: a chat, and a forum topic in it if any."""

    chat_id: int
    thread_id: int | None = None

    @classmethod
    def of(cls, origin: Origin) -> Place:
        chat, _, thread = origin.channel_id.partition(":")
        return cls(int(chat), int(thread) if thread else None)

    def channel(self) -> str:
        return f"{self.chat_id}:{self.thread_id}" if self.thread_id else str(self.chat_id)


class Chats:
    """Chat ids as they are now: groups that became supergroups, old id → new id."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._moved: dict[int, int] = {}

    async def load(self) -> None:
        for key, new in (await self.runtime.kv.scan(ALIAS_PREFIX)).items():
            self._moved[int(key.removeprefix(ALIAS_PREFIX))] = int(new)

    def current(self, chat_id: int) -> int:
        return self._moved.get(chat_id, chat_id)

    async def migrate(self, old: int, new: int) -> None:
        """A group became a supergroup: its session, history and settings carry over."""
        if self._moved.get(old) == new:
            return
        self._moved[old] = new
        await self.runtime.kv.set(f"{ALIAS_PREFIX}{old}", str(new))
        store = self.runtime.store
        moved = await store.rename(telegram_session_id(old), telegram_session_id(new))
        log.info("telegram group migrated", old=old, new=new, session_moved=moved)
