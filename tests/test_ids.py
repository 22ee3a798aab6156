from __future__ import annotations

import builtins
import os
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
