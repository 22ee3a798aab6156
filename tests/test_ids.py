from __future__ import annotations

import builtins
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import ids
from gateway.ids import (
    InvalidSessionId,
    Prefix,
    discord_session_id,
    new_session_id,
    telegram_session_id,
    validate_session_id,
)
from gateway.store.files import SessionsDir

HOSTILE = [
    "../x",
    "dc-../../etc",
    "dc-..",
    "/etc/passwd",
    "dc-/etc/passwd",
    "cli-abc\x00def",
    "cli-" + "a" * 10_000,
    "cli-",
    "",
    "tg-1 2",
    "xx-123",
    "CLI-abc",
    "temp-abc/..",
    "dc-123\n",
    "chat-é",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_ids_rejected(value: str) -> None:
    with pytest.raises(InvalidSessionId) as info:
        validate_session_id(value)
    message = str(info.value)
    assert "cli, chat, dc, tg, temp" in message
    assert len(message) < 400  # a 10 KB id is not echoed back whole


@pytest.mark.parametrize("value", [None, 12, b"cli-abc", ["cli-abc"]])
def test_non_strings_rejected(value: Any) -> None:
    with pytest.raises(InvalidSessionId):
        validate_session_id(value)


@pytest.fixture
def no_filesystem(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    touched: list[str] = []

    def spy(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            touched.append(f"{name}{args!r}")
            return real(*args, **kwargs)

        return wrapper

    for name in ("open", "stat", "mkdir", "scandir", "listdir", "rename", "unlink", "rmdir"):
        monkeypatch.setattr(os, name, spy(f"os.{name}", getattr(os, name)))
    monkeypatch.setattr(builtins, "open", spy("open", builtins.open))
    yield touched


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_ids_never_reach_the_filesystem(
    tmp_path: Path, value: str, no_filesystem: list[str]
) -> None:
    sessions = SessionsDir(tmp_path / "sessions")
    for action in (sessions.create, sessions.get, sessions.path_of, sessions.delete):
        with pytest.raises(InvalidSessionId):
            action(value)
    assert no_filesystem == []
    assert not (tmp_path / "sessions").exists()


@pytest.mark.parametrize(
    "value",
    ["cli-abc", "chat-A_b-9", "dc-123456789012345678", "tg--1001234567890", "temp-" + "x" * 128],
)
def test_valid_ids(value: str) -> None:
    assert validate_session_id(value) == value


def test_minted_ids_are_valid_and_unique() -> None:
    minted = {new_session_id(p) for p in (Prefix.cli, Prefix.chat, Prefix.temp) for _ in range(50)}
    assert len(minted) == 150
    for sid in minted:
        assert validate_session_id(sid) == sid


def test_platform_ids_are_built_not_minted() -> None:
    with pytest.raises(ValueError):
        new_session_id("dc")
    assert discord_session_id(123) == "dc-123"
    assert telegram_session_id(-1001234567890) == "tg--1001234567890"
    assert telegram_session_id(-100123, 7) == "tg--100123_7"
    with pytest.raises(InvalidSessionId):
        discord_session_id("12/../3")


def test_prefix_and_lifetime() -> None:
    assert ids.prefix_of("tg--5") is Prefix.tg
    assert ids.is_permanent("dc-1")
    assert not ids.is_permanent("temp-1")


@pytest.mark.parametrize("value", ["", "a/b", "..", "x" * 65, "a b", "a\x00"])
def test_bad_hashes(value: str) -> None:
    with pytest.raises(ids.InvalidHash):
        ids.validate_hash(value)


def test_task_hashes_are_distinct_across_many_pages() -> None:
    from gateway.ids import new_task_hash, new_window_hash

    hashes = [new_task_hash() for _ in range(5000)]  # ten pages of random bytes
    windows = [new_window_hash() for _ in range(5000)]
    assert all(re.fullmatch(r"[0-9a-f]{16}", h) for h in hashes)
    assert all(re.fullmatch(r"[0-9a-f]{12}", w) for w in windows)
    assert len(set(hashes)) == len(hashes)
    assert len(set(windows)) == len(windows)


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    import os

    from gateway.ids import new_task_hash

    new_task_hash()  # the parent has a page in hand
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, new_task_hash().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    assert child != new_task_hash()
