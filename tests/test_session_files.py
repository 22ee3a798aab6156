from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from gateway.ids import InvalidHash
from gateway.store.files import (
    CMD_HISTORY_LIMIT,
    SessionsDir,
    Summary,
    resume_state_name,
)
from gateway.store.fslock import SessionDirectoryMissing


@pytest.fixture
def sessions(tmp_path: Path) -> SessionsDir:
    return SessionsDir(tmp_path / "sessions")


def test_layout_uses_the_documented_names(sessions: SessionsDir) -> None:
    files = sessions.create("tg--100200")
    files.write_summary(Summary("they talked", cursor=42, updated_at=1))
    files.add_cmd_history("hello")
    files.write_pending("abc123", {"kind": "confirm"})
    files.write_resume_state("sonnet", "sys", {"session": "x"}, with_tools=True)
    files.action_log.append("user", "hi")
    names = {p.relative_to(files.dir).as_posix() for p in files.dir.rglob("*")}
    assert {
        "summary.json",
        ".summary_cursor",
        ".cmd_history",
        "pending",
        "pending/abc123.json",
        ".claude_code",
        "action.log",
    } <= names
    assert not any(n.endswith(".tmp") for n in names)


def test_summary_round_trip_and_cursor(sessions: SessionsDir) -> None:
    files = sessions.create("cli-s")
    assert files.read_summary() is None
    assert files.read_summary_cursor() == 0
    files.write_summary(Summary("part one", cursor=10, updated_at=5))
    files.write_summary(Summary("part one and two", cursor=25, updated_at=6))
    assert files.read_summary() == Summary("part one and two", 25, 6)
    assert (files.dir / ".summary_cursor").read_text().strip() == "25"


def test_corrupt_summary_is_ignored_not_fatal(sessions: SessionsDir) -> None:
    files = sessions.create("cli-s")
    (files.dir / "summary.json").write_text("{not json")
    assert files.read_summary() is None


def test_cmd_history_limits_and_dedupes(sessions: SessionsDir) -> None:
    files = sessions.create("cli-h")
    files.add_cmd_history("first\nsecond line")
    files.add_cmd_history("first\nsecond line")
    files.add_cmd_history("   ")
    assert files.read_cmd_history() == ["first\nsecond line"]
    for i in range(120):
        files.add_cmd_history(f"cmd {i}")
    entries = files.read_cmd_history()
    assert len(entries) == CMD_HISTORY_LIMIT
    assert entries[-1] == "cmd 119"
    assert entries[0] == f"cmd {120 - CMD_HISTORY_LIMIT}"
    files.add_cmd_history("cmd 118")  # not consecutive: kept
    assert files.read_cmd_history()[-2:] == ["cmd 119", "cmd 118"]


def test_pending_prompts(sessions: SessionsDir) -> None:
    files = sessions.create("dc-1")
    files.write_pending("t1", {"question": "ok?", "origin": {"platform": "discord"}})
    files.write_pending("t2", {"question": "sure?"})
    assert dict(files.list_pending()) == {
        "t1": {"question": "ok?", "origin": {"platform": "discord"}},
        "t2": {"question": "sure?"},
    }
    assert files.remove_pending("t1")
    assert not files.remove_pending("t1")
    assert [h for h, _ in files.list_pending()] == ["t2"]
    for bad in ("../x", "a/b", ""):
        with pytest.raises(InvalidHash):
            files.write_pending(bad, {})


def test_torn_pending_file_is_skipped(sessions: SessionsDir) -> None:
    files = sessions.create("dc-1")
    files.write_pending("good", {"a": 1})
    (files.dir / "pending" / "bad.json").write_text('{"a":')
    assert dict(files.list_pending()) == {"good": {"a": 1}}


def test_resume_state_naming() -> None:
    name = resume_state_name("claude-sonnet@2025/x|y", "prompt", with_tools=True)
    assert name.startswith("claude-sonnet_2025_x_y_") and name.endswith(".json")
    plain = resume_state_name("claude-sonnet@2025/x|y", "prompt", with_tools=False)
    assert plain.endswith("_plain.json")
    assert resume_state_name("m", "a", with_tools=True) != resume_state_name(
        "m", "b", with_tools=True
    )
    assert "/" not in resume_state_name("../../etc/passwd", "p", with_tools=True)


def test_resume_state_round_trip(sessions: SessionsDir) -> None:
    files = sessions.create("cli-r")
    state = {"session_id": "abc", "fingerprints": ["1", "2"], "last_answer": "done"}
    files.write_resume_state("opus", "sys", state, with_tools=False)
    assert files.read_resume_state("opus", "sys", with_tools=False) == state
    assert files.read_resume_state("opus", "sys", with_tools=True) is None
    path = files.resume_state_path("opus", "sys", with_tools=False)
    assert json.loads(path.read_text()) == state


def test_writes_after_delete_never_resurrect(sessions: SessionsDir) -> None:
    files = sessions.create("cli-d")
    assert sessions.delete("cli-d")
    with pytest.raises(SessionDirectoryMissing):
        files.write_summary(Summary("x", 1, 1))
    with pytest.raises(SessionDirectoryMissing):
        files.add_cmd_history("x")
    with pytest.raises(SessionDirectoryMissing):
        files.write_pending("t", {})
    with pytest.raises(SessionDirectoryMissing):
        files.write_resume_state("m", "s", {}, with_tools=True)
    with pytest.raises(SessionDirectoryMissing):
        files.action_log.append("user", "late")
    assert not files.dir.exists()
    assert sessions.list_ids() == []


def test_delete_is_one_rename_and_the_trash_empties_later(sessions: SessionsDir) -> None:
    for _ in range(2):  # the same id deleted twice before the trash is emptied
        files = sessions.create("temp-twice")
        (files.dir / "note.txt").write_text("x")
        assert sessions.delete("temp-twice")
        assert not files.dir.exists()
    assert not sessions.delete("temp-twice")
    assert sessions.list_ids() == []
    assert len(list(sessions.trash.iterdir())) == 2
    stop = threading.Event()
    stop.set()
    assert sessions.empty_trash(stop) == 0  # a stop before the first folder removes nothing
    assert sessions.empty_trash() == 2
    assert list(sessions.trash.iterdir()) == []
    assert sessions.empty_trash() == 0


def test_list_ids_ignores_foreign_entries(sessions: SessionsDir) -> None:
    sessions.create("cli-a")
    sessions.create("tg--5")
    (sessions.root / "not-a-session").mkdir()
    (sessions.root / ".deleting-x").mkdir()
    (sessions.root / "cli-file").write_text("")
    assert sessions.list_ids() == ["cli-a", "tg--5"]
