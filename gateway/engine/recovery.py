"""Tasks a previous process left unfinished, found from the journals in the archive.

A journal whose task holds a presence key belongs to a live task of another process (whose
key has not expired); one this process knows is its own. Every other journal is a task that
died with its process, whatever instance ran it: it is taken up, in archive order.

Journals that earlier versions kept only as `pending/<task>.json` files are read once, at
start-up, and moved into the archive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Container
from typing import Any

from gateway.engine.journal import JournalHead, Replay, replay_of
from gateway.logs import get_logger
from gateway.presence import Presence
from gateway.store.files import SessionFiles
from gateway.store.journals import JournalRecord
from gateway.store.sessions import SessionStore

log = get_logger(__name__)


async def unfinished_tasks(
    store: SessionStore, presence: Presence, known: Container[str]
) -> list[tuple[JournalHead, Replay]]:
    """Journals of tasks that died with their process, oldest message first."""
    found: list[tuple[JournalHead, Replay]] = []
    alive = {task for _, task in await presence.running_tasks()}
    for record in await store.unfinished():
        if record.task_hash in alive or record.task_hash in known:
            continue
        try:
            head = JournalHead.of(record)
        except (KeyError, TypeError, ValueError):
            log.warning("unreadable journal set aside", task=record.task_hash)
            continue
        found.append((head, replay_of(record)))
    return found


async def import_journal_files(store: SessionStore) -> int:
    """Move journals written as files by earlier versions into the archive; returns how many.
    A task whose run is recorded had finished: only its file is left to remove."""
    moved = 0
    in_archive = {record.task_hash for record in await store.unfinished()}
    for sid in await asyncio.to_thread(store.dirs.list_ids):
        files = store.files(sid)
        for task_hash, data in await asyncio.to_thread(_pending_of, files):
            if task_hash in in_archive:
                continue  # a prompt's file, written by this version
            record = _legacy_record(sid, task_hash, data)
            if record is None:
                if "prompt" in data:  # the prompt of a task that is over
                    await asyncio.to_thread(files.remove_pending, task_hash)
                continue
            if not await store.run_recorded(sid, task_hash):
                await store.insert_journal(record)
                moved += 1
            await asyncio.to_thread(files.remove_pending, task_hash)
    if moved:
        log.info("journals moved into the archive", count=moved)
    return moved


def _pending_of(files: SessionFiles) -> list[tuple[str, dict[str, Any]]]:
    return list(files.list_pending())


def _legacy_record(sid: str, task_hash: str, data: dict[str, Any]) -> JournalRecord | None:
    try:
        return JournalRecord(
            task_hash=task_hash,
            session_id=sid,
            origin=dict(data["origin"]),
            text=str(data["text"]),
            user_message_id=int(data["user_message_id"]),
            user_sent_at=int(data.get("user_sent_at", 0)),
            submitted_at=int(data.get("submitted_at", 0)),
            status=str(data.get("status", "queued")),
            steps=tuple(s for s in data.get("steps") or [] if isinstance(s, dict)),
        )
    except (KeyError, TypeError, ValueError):
        return None  # not a journal of an earlier version (a prompt's file, or damaged)
