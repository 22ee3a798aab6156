"""Session ids, task hashes and window hashes.

A session id becomes a directory name, so it is validated here, by one regular expression,
before anything else sees it. Nothing in this module touches the filesystem.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import uuid
from enum import StrEnum
from typing import Final


class Prefix(StrEnum):
    cli = "cli"
    chat = "chat"
    dc = "dc"
    tg = "tg"
    temp = "temp"


PERMANENT_PREFIXES: Final = frozenset({Prefix.cli, Prefix.chat, Prefix.dc, Prefix.tg})
SESSION_ID_RE: Final = re.compile(r"(cli|chat|dc|tg|temp)-[A-Za-z0-9_-]{1,128}")
# Task and window hashes appear in file names (pending/<task_hash>.json) and in action.log
# brackets, so they are held to a small alphabet too.
HASH_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_SHOWN = 40


class InvalidSessionId(ValueError):
    """A session id that does not match the allowed form."""

    def __init__(self, value: object) -> None:
        shown = repr(value)
        if len(shown) > _MAX_SHOWN:
            shown = shown[:_MAX_SHOWN] + "…"
        super().__init__(
            f"invalid session id {shown}: expected <prefix>-<key> with prefix one of "
            "cli, chat, dc, tg, temp and a key of 1-128 characters from A-Z a-z 0-9 _ -"
        )


class InvalidHash(ValueError):
    """A task or window hash outside `[A-Za-z0-9_-]{1,64}`."""

    def __init__(self, what: str, value: object) -> None:
        shown = repr(value)
        if len(shown) > _MAX_SHOWN:
            shown = shown[:_MAX_SHOWN] + "…"
        super().__init__(f"invalid {what} {shown}: expected 1-64 characters from A-Z a-z 0-9 _ -")


def validate_session_id(value: object) -> str:
    """Return `value` if it is a well-formed session id, else raise `InvalidSessionId`."""
    if not isinstance(value, str) or SESSION_ID_RE.fullmatch(value) is None:
        raise InvalidSessionId(value)
    return value


def is_valid_session_id(value: object) -> bool:
    return isinstance(value, str) and SESSION_ID_RE.fullmatch(value) is not None


def validate_hash(value: object, what: str = "task hash") -> str:
    if not isinstance(value, str) or HASH_RE.fullmatch(value) is None:
        raise InvalidHash(what, value)
    return value


def prefix_of(session_id: str) -> Prefix:
    return Prefix(validate_session_id(session_id).split("-", 1)[0])


def is_permanent(session_id: str) -> bool:
    return prefix_of(session_id) in PERMANENT_PREFIXES


def new_session_id(prefix: Prefix | str) -> str:
    """Mint a random id for the prefixes whose key is not a platform id."""
    prefix = Prefix(prefix)
    if prefix in (Prefix.dc, Prefix.tg):
        raise ValueError(f"{prefix}- ids are built from platform ids, not minted")
    return f"{prefix}-{uuid.uuid4()}"


def discord_session_id(channel_id: int | str) -> str:
    """`dc-<channel id>`; a thread is a channel of its own and so a session of its own."""
    return validate_session_id(f"dc-{_platform_key(channel_id)}")


def telegram_session_id(chat_id: int | str, thread_id: int | str | None = None) -> str:
    """`tg-<chat id>`, or `tg-<chat id>_<topic id>` for a forum topic other than General.

    Group ids are negative, so `tg--1001234567890` is a valid id.
    """
    key = _platform_key(chat_id)
    if thread_id is not None:
        key = f"{key}_{_platform_key(thread_id)}"
    return validate_session_id(f"tg-{key}")


def _platform_key(value: int | str) -> str:
    text = str(value)
    if re.fullmatch(r"-?[0-9]{1,32}", text) is None:
        raise InvalidSessionId(f"?-{text}")
    return text


class _RandomPool:
    """Bytes from the operating system's random source, fetched a page at a time.

    Ids are made on the event loop, where every system call lets the worker threads take the
    interpreter; one call per page of ids instead of one per id keeps the loop running."""

    PAGE = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._page = b""
        self._at = 0
        self._pid = 0

    def take(self, size: int) -> bytes:
        with self._lock:
            # A forked child must not hand out its parent's remaining bytes.
            if self._at + size > len(self._page) or self._pid != os.getpid():
                self._page, self._at, self._pid = secrets.token_bytes(self.PAGE), 0, os.getpid()
            chunk = self._page[self._at : self._at + size]
            self._at += size
            return chunk


_RANDOM = _RandomPool()


def new_task_hash() -> str:
    return _RANDOM.take(8).hex()


def new_window_hash() -> str:
    return _RANDOM.take(6).hex()
