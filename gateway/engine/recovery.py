"""Journals that earlier versions kept only as `pending/<task>.json` files: read once, at
start-up, and moved into the archive, where recovery (`Router.recover`) finds every unfinished
task."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.logs import get_logger
from gateway.store.files import SessionFiles
from gateway.store.journals import JournalRecord
from gateway.store.sessions import SessionStore

log = get_logger(__name__)


async def import_journal_files(store: SessionStore) -> int:
    """Move journals written as files by earlier versions into the archive; returns how many.
    A task whose run is recorded had finished: only its file is left to remove."""
    moved = 0
    in_archive = {record.task_hash for record in await store.unfinished()}
    # Most folders have no pending/ at all: find the few that do in one hand-off.
    for sid in await asyncio.to_thread(store.dirs.ids_with_pending):
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
