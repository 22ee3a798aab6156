"""Tasks a previous process left unfinished, found from the journals it left behind."""

from __future__ import annotations

import asyncio
from collections.abc import Container

from gateway.engine.journal import JournalHead, Replay, read_journals
from gateway.logs import get_logger
from gateway.presence import Presence
from gateway.store.sessions import SessionStore

log = get_logger(__name__)


async def unfinished_tasks(
    store: SessionStore, presence: Presence, known: Container[str]
) -> list[tuple[JournalHead, Replay]]:
    """Journals of tasks that died with their process, oldest submission first.

    A journal whose task still has a presence key is another process's live task, and one this
    process knows (`known`) is its own. A task whose run is recorded had finished: only its
    journal is left to remove.
    """
    found: list[tuple[JournalHead, Replay]] = []
    for sid in await asyncio.to_thread(store.dirs.list_ids):
        files = store.files(sid)
        journals = await asyncio.to_thread(read_journals, files, sid)
        if not journals:
            continue
        alive = {task for _, task in await presence.running_tasks(sid)}
        for journal in journals:
            if isinstance(journal, str):
                log.warning("unreadable journal set aside", session=sid, task=journal)
                continue
            head, replay = journal
            if head.task_hash in alive or head.task_hash in known:
                continue
            if await store.run_recorded(sid, head.task_hash):
                await asyncio.to_thread(files.remove_pending, head.task_hash)
                continue
            found.append((head, replay))
    found.sort(key=lambda journal: journal[0].submitted_at)
    return found
