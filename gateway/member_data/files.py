"""One member's text taken out of a session's files: `history.json` lines by archive id, and
`action.log` lines (its rotated copy too) of their tasks or repeating what they wrote.

Both are rewritten under the lock their writers take (the session folder's for history.json,
the file's own `flock` for action.log), so no append lands in between and none is lost.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from gateway.store.action_record import ActionRecord, parse_line
from gateway.store.actionlog import ActionLog
from gateway.store.files import CMD_HISTORY, RESUME_DIR
from gateway.store.fslock import atomic_write, dir_lock
from gateway.store.history_file import HistoryFile
from gateway.store.member_data_reach import ERASED, unquote


def redact_history(
    history: HistoryFile,
    ids: Collection[int],
    texts: Collection[str],
    quotes: Collection[str] = (),
) -> int:
    """Blank the lines of `ids` (and, in lines written before they carried ids, those with
    one of `texts`), and the `quotes` in the others; how many lines changed. A session
    without a folder here has none."""
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
        elif (content := unquote(line.content, quotes)) != line.content:
            line = replace(line, content=content)
            changed += 1
        kept.append(line)
    if changed:
        history.replace(kept)
    return changed


def redact_action_log(
    log: ActionLog,
    tasks: Collection[str],
    texts: Collection[str],
    quotes: Collection[str] = (),
) -> int:
    """Blank the body of every record of `tasks`, and of every `user` record whose body is one
    of `texts` (those lines carry no task), and the `quotes` in the others; how many lines
    changed."""
    changed = 0
    for path in (log.rotated_path, log.path):
        changed += _rewrite(path, tasks, texts, quotes)
    return changed


def redact_inputs(folder: Path, quotes: Collection[str], *, whole: bool) -> int:
    """The terminal's input history (`.cmd_history`): all of it when `whole` (the member owns
    the session: what its windows typed is theirs), else the entries quoting them; how many
    entries went. Rewritten under the folder's lock, as the terminal's appends are."""
    path = folder / CMD_HISTORY
    if not path.exists():
        return 0
    with dir_lock(folder):
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return 0
        lines = raw.splitlines()
        if whole:
            path.unlink()
            return len(lines)
        kept = [line for line in lines if not _quotes(line.decode("utf-8", "replace"), quotes)]
        if len(kept) != len(lines):
            atomic_write(path, b"".join(line + b"\n" for line in kept))
        return len(lines) - len(kept)


def drop_resume_state(folder: Path) -> int:
    """Remove the backends' resume state (`.claude_code/`): it fingerprints the conversation
    and holds the last answer, and cannot be rewritten without their words; the next run of
    the session starts a fresh backend conversation. How many files went."""
    state = folder / RESUME_DIR
    if not state.is_dir():
        return 0
    gone = sum(1 for entry in state.iterdir() if entry.is_file())
    shutil.rmtree(state, ignore_errors=True)
    return gone


def _rewrite(
    path: Path, tasks: Collection[str], texts: Collection[str], quotes: Collection[str]
) -> int:
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
            elif record is not None and (unquoted := unquote(record.body, quotes)) != record.body:
                raw = replace(record, body=unquoted).format_line().encode("utf-8")
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
    return record.kind == "user" and (record.body in texts or _said(record.body) in texts)


def _said(body: str) -> str | None:
    """The text of a `user` record written as its event's JSON (a subagent's task)."""
    try:
        event = json.loads(body)
    except ValueError:
        return None
    text = event.get("text") if isinstance(event, dict) else None
    return text if isinstance(text, str) else None


def _quotes(value: str, quotes: Collection[str]) -> bool:
    return any(quote in value for quote in quotes)
