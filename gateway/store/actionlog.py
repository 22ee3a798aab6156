"""The per-session audit trail, `<home>/sessions/<sid>/action.log`: one file of
`ActionRecord` lines (see `action_record` for the line format).

Writers append each line with one `write()` on an `O_APPEND` descriptor, so lines from
several processes interleave whole. A writer never creates the session directory: once a
session is deleted, a late write fails with `SessionDirectoryMissing` instead of bringing
the directory back.

Writers also take turns through an exclusive `flock` on the file: a writer that finds the
file not ending in a newline (a crash cut a line short) ends that fragment first, so it
cannot swallow the new record, and a write that fails part way (a full disk) is truncated
away again. Readers skip, and count, lines that are not records; a line without its newline
is a write still arriving or cut short, and is never taken as a record.

Size cap: after an append leaves `action.log` at or over `max_bytes` (10 MiB by default) it
is renamed to `action.log.1`, replacing any older `action.log.1`. One rotated file is kept,
so a session holds at most about twice `max_bytes` of log. The rename happens under an
exclusive `flock` on the session directory and only if the size is still over the cap once
the lock is held, so two processes crossing the cap together rotate once; if the directory
is already locked the rotation is left to the next append over the cap. A writer that
opened `action.log` just before a rotation still lands its line in `action.log.1`; only a
writer stalled across two full rotations could lose its line.

A line about something already done (`append_all(..., hold=True)`: a message the archive
has committed) that cannot be written is held by the object, and written ahead of the next
line that can be, so the file keeps the order of events; such a line is lost only if the
process ends first.

The methods are synchronous; async callers run them in `asyncio.to_thread`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Final

from gateway.logs import get_logger
from gateway.store.action_record import ActionKind, ActionRecord, parse_line
from gateway.store.fslock import SessionDirectoryMissing

__all__ = ["DEFAULT_MAX_BYTES", "ActionKind", "ActionLog", "ActionRecord"]

ROTATED_SUFFIX: Final = ".1"
DEFAULT_MAX_BYTES: Final = 10 * 1024 * 1024

# Large enough that a tail of ordinary records costs one or two reads, small enough that a
# tail of a 10 MiB file does not pull the whole file into memory.
_TAIL_BLOCK: Final = 64 * 1024

_log = get_logger(__name__)


# --- the log file ------------------------------------------------------------------------


def _parse_stored(raw: bytes, terminated: bool) -> tuple[ActionRecord | None, bool]:
    """Parse one stored line; return the record, if any, and whether the line was bad."""
    if not raw.strip():
        return None, False
    if not terminated:
        # Every record is written together with its newline, so a line without one is a
        # write cut short (or still arriving) and not a whole record.
        return None, True
    record = parse_line(raw)
    return record, record is None


def _forward_lines(fh: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    for raw in fh:
        if raw.endswith(b"\n"):
            yield raw[:-1], True
        else:
            yield raw, False


def _backward_lines(fd: int, size: int, block: int) -> Iterator[tuple[bytes, bool]]:
    """Lines of the first `size` bytes of `fd`, last first, read in blocks from the end.

    The first item is whatever follows the last newline (often empty) and is unterminated.
    """
    pending: list[bytes] = []
    terminated = False
    pos = size
    while pos > 0:
        step = min(block, pos)
        pos -= step
        chunk = os.pread(fd, step, pos)
        if len(chunk) < step:
            # The file shrank under us (truncated by hand); stop rather than misalign.
            break
        end = len(chunk)
        while True:
            newline = chunk.rfind(b"\n", 0, end)
            if newline < 0:
                pending.append(chunk[:end])
                break
            pending.append(chunk[newline + 1 : end])
            yield b"".join(reversed(pending)), terminated
            pending.clear()
            terminated = True
            end = newline
    yield b"".join(reversed(pending)), terminated


class ActionLog:
    """`action.log` of one session, bound to its path (`<session dir>/action.log`)."""

    def __init__(self, path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._held = b""  # lines of things done that could not be written yet, in order
        self._holding = threading.Lock()

    @property
    def held(self) -> int:
        """Bytes of lines held until the disk takes them (see `append_all`)."""
        return len(self._held)

    @property
    def rotated_path(self) -> Path:
        return self.path.with_name(self.path.name + ROTATED_SUFFIX)

    def __repr__(self) -> str:
        return f"ActionLog({str(self.path)!r}, max_bytes={self.max_bytes})"

    # --- writing ---

    def append(
        self,
        kind: ActionKind | str,
        body: str,
        *,
        window_hash: str = "",
        task_hash: str = "",
        identity: str = "",
        at: datetime | None = None,
    ) -> ActionRecord:
        """Append one record and return it as it will read back; `identity` is whom it
        happened for (the requester), "" for the gateway's own lines.

        Raises `SessionDirectoryMissing` if the session directory does not exist, and
        `ValueError` for a malformed kind, hash or naive `at`, before touching the file.
        """
        return self.append_all(
            [(kind, body)], window_hash=window_hash, task_hash=task_hash, identity=identity, at=at
        )[0]

    def append_all(
        self,
        entries: Sequence[tuple[ActionKind | str, str]],
        *,
        window_hash: str = "",
        task_hash: str = "",
        identity: str = "",
        at: datetime | None = None,
        hold: bool = False,
    ) -> list[ActionRecord]:
        """`append` for several records of one task at once: each its own line, in order, in
        one write (what a task's end records, its reply and `done`, back to back).

        Lines held from earlier go first. With `hold` (the records are of something done
        already, which failing here cannot undo), lines that cannot be written for want of
        space or another error of the disk are held for the next append instead of raising."""
        when = datetime.now(UTC) if at is None else at
        records = [
            ActionRecord(
                at=when,
                window_hash=window_hash,
                kind=kind,
                task_hash=task_hash,
                body=body,
                identity=identity,
            )
            for kind, body in entries
        ]
        data = "".join(record.format_line() + "\n" for record in records).encode("utf-8")
        with self._holding:
            try:
                size = self._write(self._held + data)
            except SessionDirectoryMissing:
                raise
            except OSError as exc:
                if not hold:
                    raise
                self._held += data
                _log.error(
                    "action_log_lines_held",
                    path=str(self.path),
                    held=len(self._held),
                    error=str(exc),
                )
                return records
            if self._held:
                _log.info("action_log_held_lines_written", path=str(self.path))
            self._held = b""
        if size >= self.max_bytes:
            self._rotate()
        return records

    def write_held(self) -> int:
        """Write the lines held, if any, without waiting for the session's next line; returns
        the bytes still held (0 once the disk took them). Never raises."""
        if not self._held:
            return 0
        with contextlib.suppress(Exception):  # still no room: they stay held, as said
            self.append_all([], hold=True)
        return self.held

    def _write(self, data: bytes) -> int:
        """Append `data` with one write; return the file size seen afterwards."""
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            # O_CREAT makes the file but never a missing parent, which is what keeps a
            # deleted session deleted.
            fd = os.open(self.path, flags, 0o600)
        except FileNotFoundError as exc:
            raise SessionDirectoryMissing(
                errno.ENOENT, "session directory does not exist", str(self.path.parent)
            ) from exc
        try:
            # O_APPEND alone keeps concurrent lines whole, but the last-byte check below
            # could then see another append half copied in; writers take turns instead.
            fcntl.flock(fd, fcntl.LOCK_EX)
            start = os.fstat(fd).st_size
            if start and os.pread(fd, 1, start - 1) != b"\n":
                # A crash left part of a line; end it so it cannot swallow this record.
                data = b"\n" + data
            try:
                written = os.write(fd, data)
                while written < len(data):
                    more = os.write(fd, data[written:])
                    if more == 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
                    written += more
            except OSError:
                # Take back a partial line (a full disk, say) so the file stays line-aligned;
                # with the lock held nothing can have been appended after it.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                _log.warning("action_log_write_failed", path=str(self.path), size=len(data))
                raise
            return os.fstat(fd).st_size
        finally:
            # Closing the descriptor releases the lock.
            os.close(fd)

    def _rotate(self) -> None:
        try:
            dir_fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            try:
                fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # Someone holds the session directory: another rotation, or this very thread
                # further up the stack, which a blocking wait would deadlock. The next append
                # over the cap tries again.
                return
            try:
                # Another process may have rotated between our write and the lock.
                size = os.stat(self.path, follow_symlinks=False).st_size
            except FileNotFoundError:
                return
            if size < self.max_bytes:
                return
            os.replace(self.path, self.rotated_path)
            _log.info("action_log_rotated", path=str(self.path), size=size)
        finally:
            # Closing the descriptor releases the lock.
            os.close(dir_fd)

    # --- reading ---

    def _open_pair(self, include_rotated: bool) -> list[BinaryIO]:
        """Open files to read, oldest first.

        The current file is opened first: if a rotation slips in between the two opens both
        descriptors name the same file, which is detected and read once, instead of the
        other order's risk of missing the file rotated away.
        """
        files: list[BinaryIO] = []
        current: BinaryIO | None
        try:
            current = self.path.open("rb")
        except FileNotFoundError:
            current = None
        try:
            if include_rotated:
                try:
                    rotated = self.rotated_path.open("rb")
                except FileNotFoundError:
                    pass
                else:
                    if current is not None and _same_file(current, rotated):
                        rotated.close()
                    else:
                        files.append(rotated)
        except BaseException:
            if current is not None:
                current.close()
            raise
        if current is not None:
            files.append(current)
        return files

    def read_with_errors(self, *, include_rotated: bool = True) -> tuple[list[ActionRecord], int]:
        """All records, rotated file first, and how many non-blank lines were bad."""
        records: list[ActionRecord] = []
        skipped = 0
        files = self._open_pair(include_rotated)
        try:
            for fh in files:
                for raw, terminated in _forward_lines(fh):
                    record, bad = _parse_stored(raw, terminated)
                    skipped += bad
                    if record is not None:
                        records.append(record)
        finally:
            for fh in files:
                fh.close()
        if skipped:
            _log.warning("action_log_lines_skipped", path=str(self.path), skipped=skipped)
        return records, skipped

    def read(self, *, include_rotated: bool = True) -> list[ActionRecord]:
        """All records, rotated file first; lines that are not records are skipped."""
        return self.read_with_errors(include_rotated=include_rotated)[0]

    def tail_with_errors(self, n: int) -> tuple[list[ActionRecord], int]:
        """The last `n` records, oldest first, and how many lines passed over were skipped.

        Reads blocks from the end, so the cost follows `n`, not the size of the file.
        """
        if n <= 0:
            return [], 0
        newest_first: list[ActionRecord] = []
        skipped = 0
        files = self._open_pair(include_rotated=True)
        try:
            for fh in reversed(files):
                fd = fh.fileno()
                lines = _backward_lines(fd, os.fstat(fd).st_size, _TAIL_BLOCK)
                for raw, terminated in lines:
                    record, bad = _parse_stored(raw, terminated)
                    skipped += bad
                    if record is not None:
                        newest_first.append(record)
                        if len(newest_first) >= n:
                            break
                if len(newest_first) >= n:
                    break
        finally:
            for fh in files:
                fh.close()
        newest_first.reverse()
        return newest_first, skipped

    def tail(self, n: int) -> list[ActionRecord]:
        """The last `n` records (fewer if the log is shorter), oldest first."""
        return self.tail_with_errors(n)[0]


def _same_file(a: BinaryIO, b: BinaryIO) -> bool:
    sa = os.fstat(a.fileno())
    sb = os.fstat(b.fileno())
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
