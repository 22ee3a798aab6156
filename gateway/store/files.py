"""The files of one session under `<home>/sessions/<sid>/`, named as the session layout says.

Every path here is built from a validated session id, and nothing but `SessionsDir.create`
makes a session directory: a write that arrives after the session was deleted fails with
`SessionDirectoryMissing` instead of bringing the directory back.

All methods are blocking; async callers run them in a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gateway.ids import validate_hash, validate_session_id
from gateway.logs import get_logger
from gateway.store.actionlog import ActionLog
from gateway.store.fslock import SessionDirectoryMissing, atomic_write, dir_lock
from gateway.store.history_file import HistoryFile

log = get_logger(__name__)

HISTORY: Final = "history.json"
SUMMARY: Final = "summary.json"
SUMMARY_CURSOR: Final = ".summary_cursor"
ACTION_LOG: Final = "action.log"
CMD_HISTORY: Final = ".cmd_history"
PENDING_DIR: Final = "pending"
TRASH_DIR: Final = ".trash"  # in the sessions root; its dot keeps it from passing for a session
RESUME_DIR: Final = ".claude_code"
CMD_HISTORY_LIMIT: Final = 50
KNOWN_SESSIONS: Final = 4096  # SessionFiles kept by SessionsDir.get


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    cursor: int  # id of the last `messages` row the summary covers; 0 = none
    updated_at: int  # Unix ms


class SessionsDir:
    """`<home>/sessions`: creating, finding and deleting session directories."""

    def __init__(
        self,
        root: Path,
        *,
        history_max_bytes: int = 5 * 1024 * 1024,
        action_log_max_bytes: int = 10 * 1024 * 1024,
    ) -> None:
        self.root = root
        self.history_max_bytes = history_max_bytes
        self.action_log_max_bytes = action_log_max_bytes
        self._known: dict[str, SessionFiles] = {}
        self._known_lock = threading.Lock()

    def path_of(self, session_id: str) -> Path:
        return self.root / validate_session_id(session_id)

    def get(self, session_id: str) -> SessionFiles:
        # SessionFiles only names paths, so one per session is kept: a task asks for its
        # session's files a dozen times, and building the paths each time showed in profiles.
        files = self._known.get(session_id)
        if files is None:
            files = SessionFiles(
                self.path_of(session_id),
                history_max_bytes=self.history_max_bytes,
                action_log_max_bytes=self.action_log_max_bytes,
            )
            with self._known_lock:  # worker threads ask too
                self._known[session_id] = files
                if len(self._known) > KNOWN_SESSIONS:
                    self._forget_oldest()
        return files

    def _forget_oldest(self) -> None:
        # One holding `action.log` lines the disk had no room for is kept until they are
        # written (over the cap while the disk is full, rather than lose them).
        for session_id, files in self._known.items():
            if not files.action_log.held:
                del self._known[session_id]
                return

    def write_held(self) -> int:
        """Write the `action.log` lines every known session holds for want of room (a disk
        that was full); returns the bytes still held. Blocking: call it from a thread."""
        with self._known_lock:
            holding = [files for files in self._known.values() if files.action_log.held]
        still = 0
        for files in holding:
            still += files.action_log.write_held()
        if holding:
            log.info("held action.log lines written", sessions=len(holding), still_held=still)
        return still

    def create(self, session_id: str) -> SessionFiles:
        files = self.get(session_id)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        files.dir.mkdir(exist_ok=True, mode=0o700)
        return files

    @property
    def trash(self) -> Path:
        return self.root / TRASH_DIR

    def delete(self, session_id: str) -> bool:
        """Take the session's folder away: one rename into the trash, so writers that take its
        lock after this find it gone at once. Its files stay on disk until `empty_trash`, which
        the store runs in the background: a folder's files cost a unlink each, and a reaper
        pass over thousands of sessions should not wait for them."""
        return bool(self.delete_many([session_id]))

    def delete_many(self, session_ids: Iterable[str]) -> set[str]:
        """`delete` for many: the ids whose folder was there and went."""
        gone: set[str] = set()
        trash_ready = False
        for session_id in session_ids:
            path = self.path_of(session_id)
            try:
                with dir_lock(path):
                    if not trash_ready:
                        self.trash.mkdir(exist_ok=True, mode=0o700)
                        trash_ready = True
                    # The same id can be deleted again, re-created in between, before the
                    # trash is emptied: each goes in under a name of its own.
                    os.rename(path, self.trash / f"{path.name}.{secrets.token_hex(6)}")
            except (SessionDirectoryMissing, NotADirectoryError):
                continue
            gone.add(session_id)
        return gone

    def empty_trash(self, stop: threading.Event | None = None) -> int:
        """Remove what `delete` put in the trash (and what a crash left there), until `stop`
        is set. Returns how many folders went."""
        try:
            entries = list(os.scandir(self.trash))
        except FileNotFoundError:
            return 0
        removed = 0
        for entry in entries:
            if stop is not None and stop.is_set():
                break
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:  # a link planted where a folder was: the link goes, never what it points at
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
            removed += 1
        return removed

    def list_ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        found = []
        for entry in os.scandir(self.root):
            if entry.is_dir() and not entry.name.startswith("."):
                with contextlib.suppress(ValueError):
                    found.append(validate_session_id(entry.name))
        return sorted(found)

    def ids_with_pending(self) -> list[str]:
        """The sessions whose folder has a `pending/` folder: one pass over the root, a stat
        per folder, no per-session objects (start-up runs it over every folder)."""
        return [sid for sid in self.list_ids() if os.path.isdir(self.root / sid / PENDING_DIR)]


class SessionFiles:
    def __init__(
        self,
        directory: Path,
        *,
        history_max_bytes: int = 5 * 1024 * 1024,
        action_log_max_bytes: int = 10 * 1024 * 1024,
    ) -> None:
        self.dir = directory
        self.history = HistoryFile(directory / HISTORY, max_bytes=history_max_bytes)
        self.action_log = ActionLog(directory / ACTION_LOG, max_bytes=action_log_max_bytes)
        # history.json was checked against the archive by this process: kept here rather than
        # in a set of every session ever written, so it goes when the cache lets this go.
        self.history_checked = False

    def _require_dir(self) -> None:
        if not self.dir.is_dir():
            raise SessionDirectoryMissing(str(self.dir))

    # -- summary ---------------------------------------------------------------------------

    def read_summary(self) -> Summary | None:
        try:
            raw = json.loads((self.dir / SUMMARY).read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            log.warning("summary unreadable, ignoring it", path=str(self.dir / SUMMARY))
            return None
        text = raw.get("summary") if isinstance(raw, dict) else None
        if not isinstance(text, str):
            return None
        updated = raw.get("updated_at", 0)
        return Summary(text, self.read_summary_cursor(), updated if isinstance(updated, int) else 0)

    def read_summary_cursor(self) -> int:
        try:
            text = (self.dir / SUMMARY_CURSOR).read_text().strip()
        except FileNotFoundError:
            return 0
        return int(text) if text.isdigit() else 0

    def write_summary(self, summary: Summary) -> None:
        # The summary goes first: a crash between the two leaves the cursor behind, which only
        # means some messages are folded in again, never that some are skipped.
        # Both files copy the archive's summary row, which is what every reader takes once it
        # exists: they need to be whole, not durable.
        self._require_dir()
        body = {"summary": summary.text, "cursor": summary.cursor, "updated_at": summary.updated_at}
        data = json.dumps(body, ensure_ascii=False).encode()
        atomic_write(self.dir / SUMMARY, data, durable=False)
        atomic_write(self.dir / SUMMARY_CURSOR, f"{summary.cursor}\n".encode(), durable=False)

    def reset_conversation(self, last_message_id: int, at: int) -> None:
        """Empty the conversation window and the summary; the SQL archive keeps all.

        The cursor moves to the newest archived message: the agent's window starts after it,
        and nothing before it is folded into a summary again.
        """
        self.history.replace([])
        self.write_summary(Summary("", last_message_id, at))

    # -- terminal input history -------------------------------------------------------------

    def read_cmd_history(self) -> list[str]:
        try:
            data = (self.dir / CMD_HISTORY).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        entries = []
        for line in data.splitlines():
            # One JSON string per line keeps multi-line entries intact.
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, str):
                    entries.append(value)
        return entries[-CMD_HISTORY_LIMIT:]

    def add_cmd_history(self, entry: str) -> list[str]:
        if not entry.strip():
            return self.read_cmd_history()
        with dir_lock(self.dir):
            entries = self.read_cmd_history()
            if not entries or entries[-1] != entry:
                entries.append(entry)
            entries = entries[-CMD_HISTORY_LIMIT:]
            body = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries)
            atomic_write(self.dir / CMD_HISTORY, body.encode())
        return entries

    # -- pending prompts -------------------------------------------------------------------

    def pending_path(self, task_hash: str) -> Path:
        return self.dir / PENDING_DIR / f"{validate_hash(task_hash)}.json"

    def write_pending(self, task_hash: str, data: dict[str, Any]) -> None:
        path = self.pending_path(task_hash)
        self._require_dir()
        path.parent.mkdir(exist_ok=True, mode=0o700)
        atomic_write(path, json.dumps(data, ensure_ascii=False).encode())

    def read_pending(self, task_hash: str) -> dict[str, Any] | None:
        try:
            value = json.loads(self.pending_path(task_hash).read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            log.warning("pending prompt unreadable", task_hash=task_hash, session=self.dir.name)
            return None
        return value if isinstance(value, dict) else None

    def remove_pending(self, task_hash: str) -> bool:
        try:
            self.pending_path(task_hash).unlink()
        except FileNotFoundError:
            return False
        return True

    def list_pending(self) -> Iterator[tuple[str, dict[str, Any]]]:
        folder = self.dir / PENDING_DIR
        if not folder.is_dir():
            return
        for entry in sorted(folder.glob("*.json")):
            task_hash = entry.stem
            data = self.read_pending(task_hash)
            if data is not None:
                yield task_hash, data

    # -- backend resume state ----------------------------------------------------------------

    def resume_state_path(self, model: str, system_prompt: str, *, with_tools: bool) -> Path:
        name = resume_state_name(model, system_prompt, with_tools=with_tools)
        return self.dir / RESUME_DIR / name

    def read_resume_state(
        self, model: str, system_prompt: str, *, with_tools: bool
    ) -> dict[str, Any] | None:
        path = self.resume_state_path(model, system_prompt, with_tools=with_tools)
        try:
            value = json.loads(path.read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def write_resume_state(
        self, model: str, system_prompt: str, state: dict[str, Any], *, with_tools: bool
    ) -> None:
        path = self.resume_state_path(model, system_prompt, with_tools=with_tools)
        self._require_dir()
        path.parent.mkdir(exist_ok=True, mode=0o700)
        atomic_write(path, json.dumps(state, ensure_ascii=False).encode())


_UNSAFE_MODEL_CHARS = re.compile(r"[@/|]")


def resume_state_name(model: str, system_prompt: str, *, with_tools: bool) -> str:
    """`<model>_<hash>.json`, `_plain` before the suffix for calls without tools.

    `@`, `/` and `|` in model names become `_`; anything else outside a safe alphabet does too,
    since the name lands on the filesystem.
    """
    safe_model = re.sub(r"[^A-Za-z0-9._-]", "_", _UNSAFE_MODEL_CHARS.sub("_", model))[:100]
    digest = hashlib.sha256(system_prompt.encode()).hexdigest()[:16]
    plain = "" if with_tools else "_plain"
    return f"{safe_model or '_'}_{digest}{plain}.json"
