"""`history.json`: the recent conversation of a session, as a JSON array appended in place.

Layout, one message per line so a torn tail is easy to find::

    [
    {"role":"user","content":"hi","send_at":1700000000000,"sender":"ann","id":41},
    {"role":"assistant","content":"hello","send_at":1700000000100,"sender":"agent","id":42}
    ]

Appending overwrites the closing `\\n]\\n` with `,\\n<message>\\n]\\n`: the cost is the size of the
new message, not of the file, and the file is valid JSON again when the write returns.
A crash in the middle of that write leaves a tail that is not valid JSON; the next read or append
notices it from the last bytes and rewrites the file with every complete line, so at most the
torn message is lost here; the archive keeps it, and the store files what the file lacks
again (`MessageArchive.catch_up_history`): the file is a cache of the archive's tail.

The file is bounded: once it passes `max_bytes` the oldest messages are dropped until it is at
three quarters of the cap, so trimming happens once per quarter-cap of new text rather than on
every append. Older messages stay searchable in the SQL archive.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

from gateway.logs import get_logger
from gateway.store.fslock import SessionDirectoryMissing, atomic_write, dir_lock
from gateway.store.history_cache import TailCache, file_key

log = get_logger(__name__)

EMPTY: Final = b"[\n]\n"
CLOSE: Final = b"\n]\n"
_TRIM_TO: Final = 0.75
TAIL_BLOCK: Final = 64 * 1024
# How many recently filed ids an append remembers (a catch-up racing a late writer). Kept in
# a fixed array: thousands of sessions' files are cached, and an id set each adds up.
RECENT_IDS: Final = 32


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    role: str
    content: str
    send_at: int  # Unix milliseconds, the one time unit used everywhere
    sender: str = ""
    # The message's archive id: how far the file has caught up with the archive (0 in lines
    # written before ids were kept).
    id: int = 0

    def to_json(self) -> bytes:
        # The fields in their declared order, spelled out: asdict() copies deeply and costs
        # several times the encoding itself on the per-message path.
        line = {
            "role": self.role,
            "content": self.content,
            "send_at": self.send_at,
            "sender": self.sender,
            "id": self.id,
        }
        return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode()

    @classmethod
    def from_obj(cls, obj: Any) -> HistoryMessage | None:
        if not isinstance(obj, dict):
            return None
        role, content, send_at = obj.get("role"), obj.get("content"), obj.get("send_at")
        sender, archive_id = obj.get("sender", ""), obj.get("id", 0)
        if not (isinstance(role, str) and isinstance(content, str)):
            return None
        if not isinstance(send_at, int) or isinstance(send_at, bool):
            return None
        if not isinstance(archive_id, int) or isinstance(archive_id, bool):
            archive_id = 0
        return cls(role, content, send_at, sender if isinstance(sender, str) else "", archive_id)


# Parsed tails of the files this process reads (see `history_cache`).
TAILS: Final = TailCache[HistoryMessage](lambda m: len(m.content) + len(m.sender) + 64)


@dataclass(frozen=True, slots=True)
class ReadResult:
    messages: list[HistoryMessage]
    repaired: bool


class HistoryFile:
    def __init__(self, path: Path, max_bytes: int = 5 * 1024 * 1024) -> None:
        self.path = path
        self.max_bytes = max_bytes
        # Archive ids this object appended lately: a ring of RECENT_IDS, made on first use.
        self._filed: array[int] | None = None
        self._next_slot = 0

    # -- reading ---------------------------------------------------------------------------

    def read(self) -> list[HistoryMessage]:
        return self.read_checked().messages

    def read_checked(self) -> ReadResult:
        """Read every message, repairing a torn tail first if there is one."""
        with dir_lock(self.path.parent):
            data = self._read_bytes()
            messages, clean = _parse(data)
            if not clean:
                self._rewrite(messages)
                log.warning("history repaired", path=str(self.path), kept=len(messages))
            return ReadResult(messages, repaired=not clean)

    def tail(self, count: int) -> list[HistoryMessage]:
        """The last `count` messages, read from the end of the file: a long history costs no
        more than a short one, and a file unchanged since its tail was last parsed here costs
        a `stat` (`history_cache`). A tail that is not one clean message per line (torn by a
        crash, edited by hand) falls back to a full, repairing read."""
        if count <= 0:
            return []
        path = str(self.path)
        with dir_lock(self.path.parent):
            try:
                file = self.path.open("rb")
            except FileNotFoundError:
                if not self.path.parent.is_dir():
                    raise SessionDirectoryMissing(str(self.path.parent)) from None
                return []
            with file:
                # The lock keeps the file as it is until the tail is parsed and remembered.
                key = file_key(os.fstat(file.fileno()))
                known = TAILS.get(path, key, count)
                if known is not None:
                    return known
                data, from_start = _read_tail_bytes(file, count)
            messages = _tail_lines(data, count, from_start)
            if messages is not None:
                # Fewer than asked for, from the start: that is the whole file.
                whole = from_start and len(messages) < count
                TAILS.put(path, key, messages, want=count, whole=whole)
                return messages
        return self.read()[-count:]

    # -- writing ---------------------------------------------------------------------------

    def append(self, message: HistoryMessage) -> None:
        self.extend([message])

    def extend(self, messages: Sequence[HistoryMessage]) -> None:
        """Append `messages`, leaving out any this object filed lately: lines carry archive
        ids, and a message a catch-up filed is not filed again by its own late writer (both
        write through the store's one `HistoryFile` per session)."""
        filed = self._filed if self._filed is not None else ()
        messages = [m for m in messages if not m.id or m.id not in filed]
        if not messages:
            return
        with dir_lock(self.path.parent):
            size = self._append_locked(messages)
            if size > self.max_bytes:
                self._trim_locked()
        for message in messages:
            if message.id:
                self._remember(message.id)

    def _remember(self, message_id: int) -> None:
        if self._filed is None:
            self._filed = array("q", bytes(8 * RECENT_IDS))
        self._filed[self._next_slot] = message_id
        self._next_slot = (self._next_slot + 1) % RECENT_IDS

    def replace(self, messages: Iterable[HistoryMessage]) -> None:
        with dir_lock(self.path.parent):
            self._rewrite(list(messages))

    def _append_locked(self, messages: Sequence[HistoryMessage]) -> int:
        body = b",\n".join(m.to_json() for m in messages)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError as exc:
            raise SessionDirectoryMissing(str(self.path.parent)) from exc
        try:
            before = os.fstat(fd)
            size = before.st_size
            tail = os.pread(fd, len(EMPTY), max(0, size - len(EMPTY)))
            if size == 0 or (tail == EMPTY and size == len(EMPTY)):
                TAILS.forget(str(self.path))
                whole = b"[\n" + body + CLOSE
                _write_or_restore(fd, whole, 0, size, tail)
                os.ftruncate(fd, len(whole))
                return len(whole)
            if not tail.endswith(CLOSE):
                # A previous writer died mid-append: repair, then append to the repaired file.
                os.close(fd)
                fd = -1
                repaired, _ = _parse(self._read_bytes())
                self._rewrite(repaired)
                log.warning("history repaired", path=str(self.path), kept=len(repaired))
                return self._append_locked(messages)
            chunk = b",\n" + body + CLOSE
            _write_or_restore(fd, chunk, size - len(CLOSE), size, tail)
            TAILS.appended(str(self.path), file_key(before), file_key(os.fstat(fd)), messages)
            return size - len(CLOSE) + len(chunk)
        finally:
            if fd >= 0:
                os.close(fd)

    def _trim_locked(self) -> None:
        messages, _ = _parse(self._read_bytes())
        budget = int(self.max_bytes * _TRIM_TO) - len(EMPTY)
        kept: list[HistoryMessage] = []
        used = 0
        for message in reversed(messages):
            cost = len(message.to_json()) + 2
            if used + cost > budget and kept:
                break
            kept.append(message)
            used += cost
        kept.reverse()
        self._rewrite(kept)
        log.info("history trimmed", path=str(self.path), dropped=len(messages) - len(kept))

    def _rewrite(self, messages: list[HistoryMessage]) -> None:
        TAILS.forget(str(self.path))
        if not messages:
            atomic_write(self.path, EMPTY)
            return
        atomic_write(self.path, b"[\n" + b",\n".join(m.to_json() for m in messages) + CLOSE)

    def _read_bytes(self) -> bytes:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            if not self.path.parent.is_dir():
                raise SessionDirectoryMissing(str(self.path.parent)) from None
            return EMPTY


def _parse(data: bytes) -> tuple[list[HistoryMessage], bool]:
    """Parse the array; on failure salvage every complete line. Returns (messages, was_clean)."""
    try:
        loaded = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        loaded = None
    if isinstance(loaded, list):
        parsed = [HistoryMessage.from_obj(item) for item in loaded]
        messages = [m for m in parsed if m is not None]
        clean = len(messages) == len(parsed) and data.endswith(CLOSE) and data.startswith(b"[\n")
        return messages, clean
    return _salvage(data), False


def _salvage(data: bytes) -> list[HistoryMessage]:
    decoder = json.JSONDecoder()
    messages: list[HistoryMessage] = []
    for raw in data.split(b"\n"):
        line = raw.decode("utf-8", errors="replace").strip()
        if not line.startswith("{"):
            continue
        try:
            # raw_decode ignores what follows the object, e.g. the "," separator or a stray "]".
            obj, _ = decoder.raw_decode(line)
        except ValueError:
            continue
        message = HistoryMessage.from_obj(obj)
        if message is not None:
            messages.append(message)
    return messages


def _read_tail_bytes(file: BinaryIO, count: int) -> tuple[bytes, bool]:
    """Enough bytes from the end to hold `count` lines; whether they reach the start."""
    position = file.seek(0, os.SEEK_END)
    data = b""
    # One more newline than messages: the line before the first one kept must end.
    while position > 0 and data.count(b"\n") <= count + 1:
        step = min(TAIL_BLOCK, position)
        position -= step
        file.seek(position)
        data = file.read(step) + data
    return data, position == 0


def _tail_lines(data: bytes, count: int, from_start: bool) -> list[HistoryMessage] | None:
    """The last `count` messages of the file's tail `data`; None when it is not clean."""
    if not data.endswith(CLOSE):
        return None
    lines = data[: -len(CLOSE)].split(b"\n")
    if from_start:
        if lines[0] != b"[":
            return None
        lines = lines[1:]
    else:
        lines = lines[1:]  # the first line is cut somewhere in its middle
    messages: list[HistoryMessage] = []
    chosen = lines[-count:]
    for index, line in enumerate(chosen):
        last = index == len(chosen) - 1
        # Every message line but the last ends with the "," that separates it from the next.
        if not last and not line.endswith(b","):
            return None
        try:
            obj = json.loads(line[:-1] if not last else line)
        except (ValueError, UnicodeDecodeError):
            return None
        message = HistoryMessage.from_obj(obj)
        if message is None:
            return None
        messages.append(message)
    return messages


def _write_or_restore(fd: int, data: bytes, offset: int, size: int, tail: bytes) -> None:
    """Write `data` at `offset` whole, or put the file back as it was (`size` bytes ending in
    `tail`) and raise: a disk that fills part way through must not leave a torn file, which
    could not be repaired until there is room again. Putting back needs no new room."""
    written = 0
    try:
        while written < len(data):
            more = os.pwrite(fd, data[written:], offset + written)
            if more == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written += more
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
            os.pwrite(fd, tail, size - len(tail))
        raise
