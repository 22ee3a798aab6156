"""What every part of the session store shares: the database, the session folders, and the
per-session turn that keeps history.json in archive order."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from gateway.keyed_locks import KeyedLocks
from gateway.logs import get_logger
from gateway.settings import Settings
from gateway.store.batching import SerialCalls
from gateway.store.db import Database
from gateway.store.files import SessionFiles, SessionsDir
from gateway.store.fslock import SessionDirectoryMissing
from gateway.store.history_file import HistoryMessage
from gateway.store.space import is_storage_full
from gateway.store.trash import TrashEmptier

log = get_logger(__name__)


class UnknownSession(LookupError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no such session: {session_id}")
        self.session_id = session_id


class SessionTaken(LookupError):
    """A session the writer found missing, and so meant to make, was made by someone else
    meanwhile: nothing was written. Whether the writer may use it is asked again."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id} was made by someone else meanwhile")
        self.session_id = session_id


class StoreBase:
    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self.dirs = SessionsDir(
            settings.sessions_dir,
            history_max_bytes=settings.history_max_bytes,
            action_log_max_bytes=settings.action_log_max_bytes,
        )
        # The sessions' files may be on another disk than the archive.
        db.space.probe(settings.sessions_dir)
        # Per session: a lock over "insert a message, then file it in history.json".
        self._archiving = KeyedLocks()
        # The audit trail's lines, a few per task: one thread, woken once per batch.
        self.file_calls = SerialCalls("agenvoy-files")
        # Deleted sessions' folders, removed off the path of whoever deleted them.
        self.trash = TrashEmptier(self.dirs)

    def files(self, session_id: str) -> SessionFiles:
        return self.dirs.get(session_id)

    def _archive_turn(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """One message write of the session at a time, so history.json lists a session's
        messages in the order of their archive ids whoever writes them (the intake, a reply)."""
        return self._archiving.hold(session_id)

    def file_committed(self, session_id: str, lines: Sequence[HistoryMessage]) -> None:
        """File lines of committed messages in history.json (blocking: after a commit, off
        the event loop). The archive has them already, so a disk that refuses them (full,
        say) must not turn the committed write into an error: they are left to the catch-up
        of the session's next write, and a full disk is marked for /healthz. A missing folder
        is the caller's to handle."""
        files = self.files(session_id)
        try:
            files.history.extend(lines)
        except SessionDirectoryMissing:
            raise
        except OSError as exc:
            files.history_checked = False  # the next write of the session catches up first
            if is_storage_full(exc):
                self.db.space.failed(exc)  # /healthz says so, though the write went through
            log.error(
                "history.json lines not written; the archive has them",
                session=session_id,
                lines=len(lines),
                error=str(exc),
            )
