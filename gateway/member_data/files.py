"""One member's text taken out of a session's files: `history.json` lines by archive id, and
`action.log` lines (its rotated copy too) of their tasks or repeating what they wrote.

Both are rewritten under the lock their writers take (the session folder's for history.json,
the file's own `flock` for action.log), so no append lands in between and none is lost.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from gateway.store.action_record import ActionRecord, parse_line
from gateway.store.actionlog import ActionLog
from gateway.store.history_file import HistoryFile
from gateway.store.member_data import ERASED


def redact_history(history: HistoryFile, ids: Collection[int], texts: Collection[str]) -> int:
    """Blank the lines of `ids` (and, in lines written before they carried ids, those with
    one of `texts`); how many lines changed. A session without a folder here has none."""
    try:
        lines = history.read()
    except FileNotFoundError:
        return 0
    changed = 0
    kept = []
    for line in lines:
        if line.id in ids or (not line.id and line.content in texts):
            line = replace(line, content=ERASED, sender="")
            changed += 1
        kept.append(line)
    if changed:
        history.replace(kept)
    return changed


def redact_action_log(log: ActionLog, tasks: Collection[str], texts: Collection[str]) -> int:
    """Blank the body of every record of `tasks`, and of every `user` record whose body is one
    of `texts` (those lines carry no task); how many lines changed."""
    changed = 0
    for path in (log.rotated_path, log.path):
        changed += _rewrite(path, tasks, texts)
    return changed


def _rewrite(path: Path, tasks: Collection[str], texts: Collection[str]) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what every appender takes before it writes
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0)
        out: list[bytes] = []
        changed = 0
        for raw in data.split(b"\n"):
            record = parse_line(raw) if raw else None
            if record is not None and _theirs(record, tasks, texts):
                raw = replace(record, body=ERASED).format_line().encode("utf-8")
                changed += 1
            out.append(raw)
        if changed:
            body = b"\n".join(out)
            os.pwrite(fd, body, 0)
            os.ftruncate(fd, len(body))
            os.fsync(fd)
        return changed
    finally:
        os.close(fd)


def _theirs(record: ActionRecord, tasks: Collection[str], texts: Collection[str]) -> bool:
    if record.body == ERASED:
        return False
    if record.task_hash and record.task_hash in tasks:
        return True
    return record.kind == "user" and record.body in texts
