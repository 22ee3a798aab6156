from __future__ import annotations

import errno
import fcntl
import itertools
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.ids import InvalidHash
from gateway.store import actionlog
from gateway.store.action_record import (
    ActionKind,
    ActionRecord,
    InvalidActionKind,
    decode_identity,
    encode_identity,
    escape_body,
    parse_line,
    unescape_body,
)
from gateway.store.actionlog import ActionLog
from gateway.store.files import SessionsDir
from gateway.store.fslock import SessionDirectoryMissing

REPO_ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


@pytest.fixture
def session_dir(tmp_path: Path) -> Path:
    path = tmp_path / "sessions" / "cli-abc"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def log(session_dir: Path) -> ActionLog:
    return ActionLog(session_dir / "action.log")


def record(body: str = "hi", kind: str = ActionKind.text, **kw: Any) -> ActionRecord:
    fields: dict[str, Any] = {"at": T0, "window_hash": "w1", "task_hash": "t1"}
    fields.update(kw)
    return ActionRecord(kind=kind, body=body, **fields)


# --- line format ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ActionKind))
def test_every_kind_round_trips(log: ActionLog, kind: ActionKind) -> None:
    rec = record(f"body of {kind}", kind)
    assert parse_line(rec.format_line()) == rec
    written = log.append(kind, "x", window_hash="w1", task_hash="t1", at=T0)
    [read_back] = log.read()
    assert read_back == written
    assert read_back.kind is kind


def test_line_layout() -> None:
    rec = record("hello world", ActionKind.tool_call, window_hash="win", task_hash="task")
    assert rec.format_line() == "[2024-01-02 03:04:05.678][win][tool_call][task] hello world"


def test_empty_hashes_render_as_empty_brackets() -> None:
    rec = record("x", window_hash="", task_hash="")
    assert rec.format_line() == "[2024-01-02 03:04:05.678][][text][] x"
    assert parse_line(rec.format_line()) == rec


@pytest.mark.parametrize(
    "body",
    [
        "line one\nline two",
        "\n",
        "\n\n\n",
        "crlf\r\nend",
        "\r",
        "back\\slash",
        "\\",
        "\\n is not a newline",
        "ends with backslash\\",
        "[starts with bracket",
        "ends with bracket]",
        "[note] bracketed",
        "[] [] []",
        "tab\there\t",
        "emoji 😀🎉 and CJK 漢字かなハングル 한국어",
        "\x00\x01\x1b[31mred\x1b[0m\x7f",
        "unicode breaks \u2028 \u2029 \x85 \x0b \x0c \x1c",
        "lone surrogate \ud800 here",
        "   leading and trailing spaces   ",
        " ",
        "",
    ],
)
def test_body_round_trip(body: str) -> None:
    rec = record(body)
    line = rec.format_line()
    assert len(line.splitlines()) == 1
    assert "\n" not in line and "\r" not in line
    line.encode("utf-8")  # must be writable as UTF-8 even for a lone surrogate
    parsed = parse_line(line)
    assert parsed == rec
    assert parsed is not None and parsed.body == body


def test_escaping_is_the_documented_one() -> None:
    assert escape_body("a\\b\nc\rd\te\x00f\u2028") == "a\\\\b\\nc\\rd\\te\\x00f\\u2028"
    assert unescape_body("a\\\\b\\nc\\rd\\te\\x00f\\u2028") == "a\\b\nc\rd\te\x00f\u2028"


def test_unknown_escapes_are_kept_literally() -> None:
    parsed = parse_line("[2024-01-02 03:04:05.678][w1][text][] C:\\path\\q \\x1 end\\")
    assert parsed is not None
    assert parsed.body == "C:\\path\\q \\x1 end\\"


def test_empty_body_has_no_trailing_space_and_both_forms_parse() -> None:
    rec = record("")
    assert rec.format_line() == "[2024-01-02 03:04:05.678][w1][text][t1]"
    assert parse_line("[2024-01-02 03:04:05.678][w1][text][t1]") == rec
    assert parse_line("[2024-01-02 03:04:05.678][w1][text][t1] ") == rec


def test_trailing_line_endings_are_ignored() -> None:
    rec = record("x")
    assert parse_line(rec.format_line() + "\n") == rec
    assert parse_line(rec.format_line() + "\r\n") == rec
    assert parse_line((rec.format_line() + "\n").encode()) == rec


def test_timestamp_is_utc_millisecond() -> None:
    at = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    rec = record("x", at=at)
    assert rec.format_line().startswith("[2024-05-06 05:08:09.123]")
    assert rec.at == datetime(2024, 5, 6, 5, 8, 9, 123000, tzinfo=UTC)
    assert rec.at.utcoffset() == timedelta(0)


def test_early_years_are_zero_padded() -> None:
    rec = record("x", at=datetime(5, 1, 2, tzinfo=UTC))
    assert rec.format_line().startswith("[0005-01-02 00:00:00.000]")
    assert parse_line(rec.format_line()) == rec


def test_unknown_kind_is_kept_as_plain_str() -> None:
    parsed = parse_line("[2024-01-02 03:04:05.678][w1][future_kind][t1] x")
    assert parsed is not None
    assert parsed.kind == "future_kind"
    assert type(parsed.kind) is str
    known = parse_line("[2024-01-02 03:04:05.678][w1][tool_result][t1] x")
    assert known is not None and known.kind is ActionKind.tool_result


# --- older lines without a task bracket ----------------------------------------------------


@pytest.mark.parametrize(
    ("line", "window", "kind", "body"),
    [
        ("[2024-01-01 00:00:00.000][w1][text] hi", "w1", "text", "hi"),
        ("[2024-01-01 00:00:00.000][w1][text] [note] hi", "w1", "text", "[note] hi"),
        ("[2024-01-01 00:00:00.000][w1][text] []", "w1", "text", "[]"),
        ("[2024-01-01 00:00:00.000][w1][text] [t1] x", "w1", "text", "[t1] x"),
        ("[2024-01-01 00:00:00.000][][done]", "", "done", ""),
        ("[2024-01-01 00:00:00.000][][done] ", "", "done", ""),
        ("[2024-01-01 00:00:00.000][w1][user] a\\nb", "w1", "user", "a\nb"),
        ("[2024-01-01 00:00:00.000][w1][old_kind] x", "w1", "old_kind", "x"),
    ],
)
def test_old_format_lines_parse(line: str, window: str, kind: str, body: str) -> None:
    parsed = parse_line(line)
    assert parsed == ActionRecord(
        at=datetime(2024, 1, 1, tzinfo=UTC), window_hash=window, kind=kind, task_hash="", body=body
    )


def test_old_and_new_forms_differ_only_by_the_space() -> None:
    old = parse_line("[2024-01-01 00:00:00.000][w1][text] [t1] x")
    new = parse_line("[2024-01-01 00:00:00.000][w1][text][t1] x")
    assert old is not None and new is not None
    assert (old.task_hash, old.body) == ("", "[t1] x")
    assert (new.task_hash, new.body) == ("t1", "x")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\n",
        "hello",
        "[2024-01-01 00:00:00.000]",
        "[2024-01-01 00:00:00.000][w1]",
        "[2024-01-01 00:00:00.000][w1][text]x",
        "[2024-01-01 00:00:00.000][w1][text][t1]x",
        "[2024-01-01 00:00:00.000][w1][text][t 1] x",
        "[2024-01-01 00:00:00.00][w1][text][t1] x",
        "[2024-01-01T00:00:00.000][w1][text][t1] x",
        "[2024-13-01 00:00:00.000][w1][text][t1] x",
        "[2024-02-30 00:00:00.000][w1][text][t1] x",
        "[2024-01-01 24:00:00.000][w1][text][t1] x",
        "[0000-01-01 00:00:00.000][w1][text][t1] x",
        "[\uff12\uff10\uff12\uff14-01-01 00:00:00.000][w1][text][t1] x",
        "[2024-01-01 00:00:00.000][w/1][text][t1] x",
        "[2024-01-01 00:00:00.000][" + "w" * 65 + "][text][t1] x",
        "[2024-01-01 00:00:00.000][w1][Text][t1] x",
        "[2024-01-01 00:00:00.000][w1][tool-call][t1] x",
        "[2024-01-01 00:00:00.000][w1][][t1] x",
        "[2024-01-01 00:00:00.000][w1][" + "k" * 33 + "][t1] x",
        "[2024-01-01 00:00:00.000][w1][text][t1] two\nlines",
        " [2024-01-01 00:00:00.000][w1][text][t1] x",
    ],
)
def test_non_records_give_none(line: str) -> None:
    assert parse_line(line) is None
    assert parse_line(line.encode("utf-8")) is None


def test_parse_line_rejects_non_text_input() -> None:
    assert parse_line(None) is None  # type: ignore[arg-type]
    assert parse_line(12) is None  # type: ignore[arg-type]
    assert parse_line(b"\xff\xfe\x00[\x80]") is None


# --- properties ----------------------------------------------------------------------------

hashes = st.just("") | st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
kinds = st.sampled_from(list(ActionKind)) | st.from_regex(r"[a-z_]{1,32}", fullmatch=True)
offsets = st.integers(-1439, 1439).map(lambda m: timezone(timedelta(minutes=m)))
moments = st.datetimes(
    min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=offsets
)
bodies = st.text(st.characters(exclude_categories=()), max_size=200)


@given(data=st.binary(max_size=500))
def test_parse_line_never_raises_on_bytes(data: bytes) -> None:
    result = parse_line(data)
    assert result is None or isinstance(result, ActionRecord)


@given(text=st.text(st.characters(exclude_categories=()), max_size=500))
def test_parse_line_never_raises_on_text(text: str) -> None:
    result = parse_line(text)
    assert result is None or isinstance(result, ActionRecord)


fragments = st.sampled_from(
    [
        "[",
        "]",
        "][",
        " ",
        "2024-01-01 00:00:00.000",
        "9999-99-99 99:99:99.999",
        "w1",
        "text",
        "future_kind",
        "\\",
        "\\x",
        "\\x4",
        "\\u12",
        "\\ud800",
        "\n",
        "\r",
        "\ufeff",
        "\x00",
        "a" * 65,
    ]
)
near_lines = st.lists(fragments | st.text(max_size=5), max_size=20).map("".join)


@given(
    prefix=st.sampled_from(["", "[2024-01-01 00:00:00.000]", "[2024-01-01 00:00:00.000][w1]"]),
    line=near_lines,
)
def test_parse_line_on_near_records_is_stable(prefix: str, line: str) -> None:
    # Whatever parses must survive being written and read again unchanged.
    for candidate in (prefix + line, (prefix + line).encode("utf-8", "surrogatepass")):
        parsed = parse_line(candidate)
        if parsed is not None:
            assert parse_line(parsed.format_line()) == parsed


@given(at=moments, window=hashes, kind=kinds, task=hashes, body=bodies)
def test_format_parse_round_trip(
    at: datetime, window: str, kind: str, task: str, body: str
) -> None:
    rec = ActionRecord(at=at, window_hash=window, kind=kind, task_hash=task, body=body)
    line = rec.format_line()
    assert len(line.splitlines()) == 1
    parsed = parse_line(line)
    assert parsed == rec
    assert parsed is not None
    assert parsed.body == body and parsed.kind == kind
    assert parsed.at == at.replace(microsecond=at.microsecond // 1000 * 1000)
    assert parse_line(line.encode("utf-8")) == rec


# --- validation on write -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"window_hash": "bad hash"}, InvalidHash),
        ({"window_hash": "w" * 65}, InvalidHash),
        ({"window_hash": "w]"}, InvalidHash),
        ({"task_hash": "a/b"}, InvalidHash),
        ({"task_hash": "t\n"}, InvalidHash),
        ({"kind": "Text"}, InvalidActionKind),
        ({"kind": "tool-call"}, InvalidActionKind),
        ({"kind": ""}, InvalidActionKind),
        ({"kind": "k" * 33}, InvalidActionKind),
        ({"kind": "text]["}, InvalidActionKind),
        ({"kind": 3}, InvalidActionKind),
        ({"at": datetime(2024, 1, 1)}, ValueError),
        ({"body": b"bytes"}, TypeError),
    ],
)
def test_invalid_input_rejected_before_writing(
    log: ActionLog, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    args: dict[str, Any] = {"kind": "text", "body": "x", "window_hash": "w1", "task_hash": "t1"}
    args.update(kwargs)
    kind, body = args.pop("kind"), args.pop("body")
    with pytest.raises(error):
        log.append(kind, body, **args)
    assert not log.path.exists()


def test_validation_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        record(kind="Bad")
    with pytest.raises(ValueError):
        record(task_hash="bad hash")


def test_a_session_log_lives_in_its_directory(session_dir: Path) -> None:
    log = SessionsDir(session_dir.parent, action_log_max_bytes=123).get("cli-abc").action_log
    assert log.path == session_dir / "action.log"
    assert log.rotated_path == session_dir / "action.log.1"
    assert log.max_bytes == 123


def test_append_returns_what_reads_back(log: ActionLog) -> None:
    at = datetime(2024, 1, 1, 12, 0, 0, 999999, tzinfo=timezone(timedelta(hours=-5)))
    rec = log.append("text", "a\nb", window_hash="w1", task_hash="t1", at=at)
    assert rec.at == datetime(2024, 1, 1, 17, 0, 0, 999000, tzinfo=UTC)
    assert log.read() == [rec]
    assert log.path.read_bytes() == (rec.format_line() + "\n").encode()


def test_append_defaults_to_now(log: ActionLog) -> None:
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    rec = log.append(ActionKind.system, "started")
    assert before <= rec.at <= datetime.now(UTC)
    assert (rec.window_hash, rec.task_hash) == ("", "")
    assert log.path.read_text().startswith(f"[{rec.at:%Y-%m-%d %H:%M:%S}.")


def test_each_append_is_one_write(log: ActionLog, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real_write = os.write

    def spy(fd: int, data: Any) -> int:
        calls.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", spy)
    log.append("text", "first\nline")
    log.append("text", "second " * 2000)
    assert len(calls) == 2
    assert all(c.endswith(b"\n") and c.count(b"\n") == 1 for c in calls)


# --- deleted sessions ----------------------------------------------------------------------


def test_deleted_session_is_not_resurrected(session_dir: Path) -> None:
    log = ActionLog(session_dir / "action.log")
    log.append("text", "before")
    shutil.rmtree(session_dir)
    with pytest.raises(SessionDirectoryMissing) as info:
        log.append("text", "late write")
    assert isinstance(info.value, FileNotFoundError)
    assert not session_dir.exists()


def test_never_existing_session_dir_is_not_created(tmp_path: Path) -> None:
    log = ActionLog(tmp_path / "sessions" / "cli-gone" / "action.log")
    with pytest.raises(SessionDirectoryMissing):
        log.append("text", "x")
    assert not (tmp_path / "sessions").exists()
    assert log.read() == []
    assert log.tail(5) == []


def test_log_file_is_created_inside_existing_dir(log: ActionLog) -> None:
    assert not log.path.exists()
    log.append("text", "x")
    assert log.path.is_file()


# --- reading -------------------------------------------------------------------------------


def test_bad_lines_are_skipped_and_counted(log: ActionLog) -> None:
    good = [record(f"r{i}", at=T0 + timedelta(seconds=i)) for i in range(3)]
    lines = [
        good[0].format_line(),
        "garbage",
        "",
        "   ",
        good[1].format_line(),
        "[2024-13-01 00:00:00.000][w1][text][t1] bad date",
        good[2].format_line(),
    ]
    log.path.write_text("\n".join(lines) + "\n")
    records, skipped = log.read_with_errors()
    assert records == good
    assert skipped == 2
    assert log.read() == good
    tail, tail_skipped = log.tail_with_errors(3)
    assert tail == good
    assert tail_skipped == 2


def test_unterminated_last_line_is_not_a_record(log: ActionLog) -> None:
    whole = record("whole")
    cut = record("cut short").format_line()
    log.path.write_bytes((whole.format_line() + "\n" + cut).encode())
    assert log.read_with_errors() == ([whole], 1)
    assert log.tail_with_errors(5) == ([whole], 1)


@pytest.mark.parametrize(
    "fragment",
    [b"[2024-01-01 00:00:00.000][w1][te", b"\xff\xfe partial utf-8 \xe6\xbc", b"x"],
)
def test_fragment_left_by_a_crash_does_not_swallow_the_next(
    log: ActionLog, fragment: bytes
) -> None:
    log.path.write_bytes(fragment)
    first = log.append("text", "after crash", at=T0)
    second = log.append("text", "next", at=T0)
    assert log.read_with_errors() == ([first, second], 1)
    assert log.tail_with_errors(2) == ([first, second], 0)
    assert log.tail_with_errors(3) == ([first, second], 1)
    assert log.path.read_bytes().startswith(fragment + b"\n[")


def test_record_cut_in_its_body_stays_separate_from_the_next(log: ActionLog) -> None:
    cut = record("the whole story").format_line()[:-6]
    log.path.write_text(cut)
    nxt = log.append("text", "next", at=T0)
    assert log.read() == [record("the whole"), nxt]


def test_failed_write_is_taken_back(log: ActionLog, monkeypatch: pytest.MonkeyPatch) -> None:
    before = log.append("text", "before", at=T0)
    real_write = os.write
    calls = 0

    def half_then_full_disk(fd: int, data: Any) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full_disk)
    with pytest.raises(OSError) as info:
        log.append("text", "x" * 1000, at=T0)
    assert info.value.errno == errno.ENOSPC
    assert calls == 2
    monkeypatch.undo()
    assert log.path.read_bytes() == (before.format_line() + "\n").encode()
    after = log.append("text", "after", at=T0)
    assert log.read_with_errors() == ([before, after], 0)


def test_read_without_rotated(session_dir: Path) -> None:
    log = ActionLog(session_dir / "action.log", max_bytes=300)
    written = [log.append("text", f"{i:03d} " + "x" * 50, at=T0) for i in range(10)]
    assert log.rotated_path.exists()
    current = log.read(include_rotated=False)
    everything = log.read()
    assert current and len(current) < len(everything)
    assert everything[-len(current) :] == current
    assert everything == written[-len(everything) :]


# --- rotation ------------------------------------------------------------------------------


def test_rotation_at_the_cap_keeps_one_rotated_file(session_dir: Path) -> None:
    max_bytes = 2000
    log = ActionLog(session_dir / "action.log", max_bytes=max_bytes)
    written = []
    for i in range(100):
        written.append(log.append("text", f"{i:03d} " + "y" * 100, window_hash="w1", at=T0))
        if log.path.exists():
            assert log.path.stat().st_size < max_bytes
        on_disk = sum(p.stat().st_size for p in session_dir.iterdir())
        assert on_disk < 2 * max_bytes + 200
    assert sorted(p.name for p in session_dir.iterdir()) == ["action.log", "action.log.1"]
    assert log.rotated_path.stat().st_size >= max_bytes
    records = log.read()
    rotated_count = len(log.rotated_path.read_bytes().splitlines())
    assert rotated_count > 0
    assert len(records) > rotated_count  # both files contribute
    assert records == written[-len(records) :]
    assert len(records) < len(written)  # older rotations were dropped


def test_rotation_triggers_exactly_at_max_bytes(session_dir: Path) -> None:
    size = len(record("x", window_hash="", task_hash="").format_line()) + 1
    exact = ActionLog(session_dir / "action.log", max_bytes=size)
    rec = exact.append("text", "x", at=T0)
    assert not exact.path.exists()
    assert exact.rotated_path.stat().st_size == size
    assert exact.read() == [rec]
    assert exact.tail(1) == [rec]

    other = session_dir.parent / "cli-other"
    other.mkdir()
    below = ActionLog(other / "action.log", max_bytes=size + 1)
    below.append("text", "x", at=T0)
    assert below.path.stat().st_size == size
    assert not below.rotated_path.exists()


def test_rotation_is_rechecked_under_the_lock(session_dir: Path) -> None:
    log = ActionLog(session_dir / "action.log", max_bytes=100)
    log.path.write_text("small\n")
    # As if another process rotated between our write and taking the lock.
    log._rotate()
    assert log.path.exists() and not log.rotated_path.exists()


def test_rotation_waits_for_a_held_directory_lock(session_dir: Path) -> None:
    log = ActionLog(session_dir / "action.log", max_bytes=200)
    dir_fd = os.open(session_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        # Appending under someone else's lock on the directory (even our own, further up the
        # stack) must not block; a thread keeps a hang from freezing the test run.
        worker = threading.Thread(target=lambda: log.append("text", "x" * 300, at=T0))
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive()
        assert log.path.stat().st_size > 200
        assert not log.rotated_path.exists()
    finally:
        os.close(dir_fd)
    last = log.append("text", "y", at=T0)
    assert not log.path.exists()
    assert [r.body for r in log.read()] == ["x" * 300, last.body]


def test_max_bytes_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ActionLog(tmp_path / "action.log", max_bytes=0)


# --- tail ----------------------------------------------------------------------------------


def test_tail_returns_last_n(log: ActionLog) -> None:
    written = [log.append("text", f"n{i}", at=T0 + timedelta(milliseconds=i)) for i in range(50)]
    assert log.tail(10) == written[-10:]
    assert log.tail(1) == written[-1:]
    assert log.tail(50) == written
    assert log.tail(500) == written
    assert log.tail(0) == []
    assert log.tail(-3) == []


def test_tail_spans_rotated_file(session_dir: Path) -> None:
    log = ActionLog(session_dir / "action.log", max_bytes=1000)
    written = [log.append("text", f"{i:03d} " + "z" * 40, at=T0) for i in range(60)]
    everything = log.read()
    in_current = len(log.read(include_rotated=False))
    n = in_current + 3
    assert n < len(everything)
    assert log.tail(n) == everything[-n:] == written[-n:]
    assert log.tail(10_000) == everything


def test_tail_with_lines_longer_than_a_block(log: ActionLog) -> None:
    written = [log.append("text", f"{i}\n" * 40_000, at=T0) for i in range(5)]
    assert log.path.stat().st_size > 3 * 64 * 1024
    assert log.tail(3) == written[-3:]
    assert log.tail(5) == written


def test_tail_reads_from_the_end_only(log: ActionLog, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [record(f"entry {i}").format_line() for i in range(40_000)]
    log.path.write_text("\n".join(lines) + "\n")
    size = log.path.stat().st_size
    assert size > 1_500_000
    read_sizes: list[int] = []
    real_pread = os.pread

    def spy(fd: int, n: int, offset: int) -> bytes:
        read_sizes.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", spy)
    tail = log.tail(5)
    assert [r.body for r in tail] == [f"entry {i}" for i in range(39_995, 40_000)]
    assert sum(read_sizes) <= 2 * 64 * 1024


# --- several processes ---------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from gateway.store.actionlog import ActionLog

    path, wid, count, max_bytes, gate = sys.argv[1:6]
    log = ActionLog(Path(path), max_bytes=int(max_bytes))
    Path(gate, f"ready-{wid}").touch()
    while not os.path.exists(os.path.join(gate, "go")):
        time.sleep(0.001)
    pad = "pad\\n\\\\" * 1000
    for seq in range(int(count)):
        log.append("text", f"{wid}:{seq}:" + pad, window_hash=f"w{wid}", task_hash=f"t{seq}")
    """
)
PAD = "pad\n\\" * 1000


def run_writers(path: Path, count: int, max_bytes: int, writers: int = 2) -> None:
    gate = path.parent.parent / "gate"
    gate.mkdir()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                str(path),
                str(w),
                str(count),
                str(max_bytes),
                str(gate),
            ],
            cwd=REPO_ROOT,
        )
        for w in range(writers)
    ]
    try:
        # Release the writers together so their appends overlap.
        deadline = time.monotonic() + 60
        while len(list(gate.glob("ready-*"))) < writers:
            assert time.monotonic() < deadline, "writers did not start"
            assert all(proc.poll() is None for proc in procs), "a writer exited early"
            time.sleep(0.01)
        (gate / "go").touch()
        for proc in procs:
            assert proc.wait(timeout=120) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def check_writer_records(records: list[ActionRecord], writers: int, count: int) -> None:
    seen: dict[int, list[int]] = {w: [] for w in range(writers)}
    for rec in records:
        wid, seq, rest = rec.body.split(":", 2)
        assert rest == PAD
        assert rec.window_hash == f"w{wid}" and rec.task_hash == f"t{seq}"
        seen[int(wid)].append(int(seq))
    for seqs in seen.values():
        # Each writer's lines appear whole and in the order it wrote them.
        assert seqs == list(range(count))


@pytest.mark.slow
def test_two_processes_append_whole_lines(log: ActionLog) -> None:
    run_writers(log.path, 500, actionlog.DEFAULT_MAX_BYTES)
    raw_lines = log.path.read_bytes().split(b"\n")
    assert raw_lines[-1] == b""
    assert len(raw_lines) - 1 == 1000
    assert all(parse_line(line) is not None for line in raw_lines[:-1])
    records, skipped = log.read_with_errors()
    assert skipped == 0
    assert len(records) == 1000
    check_writer_records(records, 2, 500)
    # Both writers were running at once, or this would not exercise interleaving.
    owners = [rec.window_hash for rec in records]
    switches = sum(1 for a, b in itertools.pairwise(owners) if a != b)
    assert switches > 1


@pytest.mark.slow
def test_two_processes_rotate_once_together(log: ActionLog) -> None:
    line_size = len(record("0:000:" + PAD, window_hash="w0", task_hash="t000").format_line()) + 1
    max_bytes = 600 * line_size
    run_writers(log.path, 500, max_bytes)
    assert log.rotated_path.stat().st_size >= max_bytes
    assert log.path.stat().st_size < max_bytes
    records, skipped = log.read_with_errors()
    assert skipped == 0
    assert len(records) == 1000
    check_writer_records(records, 2, 500)


@pytest.mark.parametrize(
    "identity",
    ["http:ann", "telegram:123", "", "a b", "caf\u00e9", "x]y", "%41", "dc:\n1"],
)
def test_an_identity_is_kept_plain_or_escaped_and_read_back(identity: str) -> None:
    encoded = encode_identity(identity)
    assert re.fullmatch(r"[A-Za-z0-9_.:@+%-]*", encoded)
    plain = re.fullmatch(r"[A-Za-z0-9_.:@+-]*", identity) is not None
    assert (encoded == identity) is plain
    assert decode_identity(encoded) == identity
