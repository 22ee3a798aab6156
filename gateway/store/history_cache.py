"""The parsed tails of recently used `history.json` files, so a task's context does not parse
the same lines again each time.

Every task reads its session's last few dozen lines; parsing them (JSON and a check of each
message) was most of what the reader threads did. An entry is the tail as parsed, under the
identity of the file it came from (inode, size, change times): a read that finds the file as
the entry knew it uses the entry, and an append made through `HistoryFile` (which holds the
session directory's lock, as every writer of the file does) moves the entry along with the
file. Anything else — another process's append, a repair, a trim, an edit by hand — changes
the identity, and the next read parses the file again. (The one change it cannot see is an edit
in place that keeps the size, made within the same tick of the file system's clock as the last
write; no writer of the gateway makes such an edit.)

`history_file.TAILS` is the process's one cache, bounded (`MAX_FILES` tails and `MAX_CHARS` of
their text), so ten thousand idle sessions hold nothing here.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

M = TypeVar("M")  # a parsed message (immutable: entries hand out the same objects)

MAX_FILES: Final = 512
# Messages can be long (16,000 characters by default): the tails' text is bounded too.
MAX_CHARS: Final = 8 * 1024 * 1024

# What identifies one state of a file: an append changes the size, a rewrite (always a new
# file renamed in) the inode, and the times catch what keeps both.
FileKey = tuple[int, int, int, int, int]


def file_key(stat: os.stat_result) -> FileKey:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


@dataclass(slots=True)
class _Tail(Generic[M]):
    key: FileKey
    messages: list[M]
    whole: bool  # the messages are the whole file, not just its end
    want: int  # how many messages the entry keeps as the file grows
    chars: int  # the weight of `messages`


class TailCache(Generic[M]):
    """Parsed tails by path, least recently used dropped first; safe across threads (each
    file's own reads and writes are already serialised by the session directory's lock)."""

    def __init__(
        self, weigh: Callable[[M], int], max_files: int = MAX_FILES, max_chars: int = MAX_CHARS
    ) -> None:
        self.weigh = weigh  # a message's share of `max_chars`
        self.max_files = max_files
        self.max_chars = max_chars
        self.chars = 0
        self.hits = 0
        self.misses = 0
        self._tails: OrderedDict[str, _Tail[M]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._tails)

    def get(self, path: str, key: FileKey, count: int) -> list[M] | None:
        """The last `count` messages of the file at `key`, if known (a new list each time)."""
        with self._lock:
            tail = self._tails.get(path)
            if tail is None or tail.key != key or (len(tail.messages) < count and not tail.whole):
                self.misses += 1
                return None
            self._tails.move_to_end(path)
            self.hits += 1
            return tail.messages[-count:]

    def put(
        self, path: str, key: FileKey, messages: Sequence[M], *, want: int, whole: bool
    ) -> None:
        """Remember the file at `key`: its last `want` messages, or all of them (`whole`)."""
        kept = list(messages[-want:])
        with self._lock:
            self._drop(path)
            self._tails[path] = _Tail(key, kept, whole, want, sum(map(self.weigh, kept)))
            self.chars += self._tails[path].chars
            self._bound()

    def appended(self, path: str, before: FileKey, after: FileKey, messages: Sequence[M]) -> None:
        """The file at `before` became `after` by appending `messages`: a tail known for
        `before` moves along; any other is dropped."""
        with self._lock:
            tail = self._tails.get(path)
            if tail is None:
                return
            if tail.key != before:
                self._drop(path)
                return
            joined = [*tail.messages, *messages]
            gone = max(0, len(joined) - tail.want)
            change = sum(map(self.weigh, messages)) - sum(map(self.weigh, joined[:gone]))
            tail.whole = tail.whole and not gone
            tail.messages = joined[gone:]
            tail.key = after
            tail.chars += change
            self.chars += change
            self._bound()

    def forget(self, path: str) -> None:
        with self._lock:
            self._drop(path)

    def _drop(self, path: str) -> None:
        tail = self._tails.pop(path, None)
        if tail is not None:
            self.chars -= tail.chars

    def _bound(self) -> None:
        while self._tails and (len(self._tails) > self.max_files or self.chars > self.max_chars):
            _, oldest = self._tails.popitem(last=False)
            self.chars -= oldest.chars
