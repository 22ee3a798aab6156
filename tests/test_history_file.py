from __future__ import annotations

import json
import os
import random
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.store.files import SessionsDir
from gateway.store.fslock import SessionDirectoryMissing
from gateway.store.history_file import HistoryFile, HistoryMessage


def msg(i: int, text: str | None = None) -> HistoryMessage:
    content = text if text is not None else f"message {i}"
    return HistoryMessage("user", content, 1_700_000_000_000 + i, f"u{i % 3}", id=i + 1)


@pytest.fixture
def history(tmp_path: Path) -> HistoryFile:
    directory = tmp_path / "cli-a"
    directory.mkdir()
    return HistoryFile(directory / "history.json")


TRICKY = '\n"quoted" ünïcødé 中文 ]}'


def test_ten_thousand_appends_stay_valid_json(history: HistoryFile) -> None:
    for i in range(10_000):
        history.append(msg(i, f"line {i}{TRICKY}"))
        if i % 997 == 0:
            json.loads(history.path.read_bytes())
    loaded = json.loads(history.path.read_bytes())
    assert len(loaded) == 10_000
    assert loaded[0]["content"].startswith("line 0\n")
    assert loaded[-1] == {
        "role": "user",
        "content": f"line 9999{TRICKY}",
        "send_at": 1_700_000_009_999,
        "sender": "u0",
        "id": 10_000,
    }
    assert history.read() == [msg(i, f"line {i}{TRICKY}") for i in range(10_000)]


def test_append_does_not_rewrite_the_file(history: HistoryFile) -> None:
    for i in range(100):
        history.append(msg(i))
    inode = os.stat(history.path).st_ino
    before = history.path.read_bytes()
    history.append(msg(100))
    after = history.path.read_bytes()
    assert os.stat(history.path).st_ino == inode  # not replaced by rename
    assert after[: len(before) - 3] == before[:-3]  # everything but the closing bracket kept


def test_every_torn_offset_of_the_last_record_is_repaired(tmp_path: Path) -> None:
    directory = tmp_path / "cli-a"
    directory.mkdir()
    history = HistoryFile(directory / "history.json")
    for i in range(5):
        history.append(msg(i, f"intact {i} 中文"))
    intact = history.path.read_bytes()
    history.append(msg(5, "the torn one, long enough to cut in many places ✂"))
    full = history.path.read_bytes()
    expected_before = [msg(i, f"intact {i} 中文") for i in range(5)]
    last = msg(5, "the torn one, long enough to cut in many places ✂")
    start = len(intact) - 3  # where the last append started writing
    for cut in range(start, len(full)):
        history.path.write_bytes(full[:cut])
        result = history.read_checked()
        assert result.messages[:5] == expected_before, cut
        assert result.messages in (expected_before, [*expected_before, last]), cut
        json.loads(history.path.read_bytes())  # repaired file is valid JSON again
        # As the next process would: it appends to the repaired file.
        restarted = HistoryFile(history.path)
        restarted.append(msg(6))
        assert restarted.read()[-1] == msg(6)


def test_random_garbage_tail_is_repaired(history: HistoryFile) -> None:
    rng = random.Random(7)
    for i in range(20):
        history.append(msg(i))
    good = history.read()
    with open(history.path, "ab") as handle:
        handle.write(bytes(rng.randrange(256) for _ in range(200)))
    assert history.read() == good


def test_torn_file_is_repaired_on_append(history: HistoryFile) -> None:
    history.append(msg(0))
    history.append(msg(1))
    data = history.path.read_bytes()
    history.path.write_bytes(data[:-10])
    history.append(msg(2))
    assert history.read() == [msg(0), msg(2)]


def test_cap_drops_oldest(tmp_path: Path) -> None:
    directory = tmp_path / "cli-a"
    directory.mkdir()
    history = HistoryFile(directory / "history.json", max_bytes=20_000)
    for i in range(1000):
        history.append(msg(i, "x" * 100))
    assert history.path.stat().st_size <= 20_000
    kept = history.read()
    assert kept[-1] == msg(999, "x" * 100)
    assert [m.send_at for m in kept] == sorted(m.send_at for m in kept)
    assert len(kept) < 1000
    assert kept[0].send_at == kept[-1].send_at - len(kept) + 1  # contiguous newest run


def test_append_into_deleted_session_does_not_resurrect_it(tmp_path: Path) -> None:
    sessions = SessionsDir(tmp_path / "sessions")
    files = sessions.create("cli-gone")
    files.history.append(msg(0))
    assert sessions.delete("cli-gone")
    with pytest.raises(SessionDirectoryMissing):
        files.history.append(msg(1))
    assert not (tmp_path / "sessions" / "cli-gone").exists()


def test_empty_and_missing_file(history: HistoryFile) -> None:
    assert history.read() == []
    history.path.write_bytes(b"")
    assert history.read() == []
    history.append(msg(1))
    assert json.loads(history.path.read_bytes()) == [
        {
            "role": "user",
            "content": "message 1",
            "send_at": 1_700_000_000_001,
            "sender": "u1",
            "id": 2,
        }
    ]


def test_foreign_but_valid_layout_is_normalised(history: HistoryFile) -> None:
    history.path.write_text(json.dumps([{"role": "user", "content": "a", "send_at": 1}]))
    history.append(msg(2))
    assert [m.content for m in history.read()] == ["a", "message 2"]


@given(
    contents=st.lists(st.text(max_size=300), max_size=40),
    count=st.integers(min_value=0, max_value=45),
)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_tail_matches_a_full_read(tmp_path: Path, contents: list[str], count: int) -> None:
    # One fresh directory per example: hypothesis reruns the body with the same tmp_path.
    directory = Path(tempfile.mkdtemp(prefix="cli-", dir=tmp_path))
    history = HistoryFile(directory / "history.json")
    history.extend([msg(i, text) for i, text in enumerate(contents)])
    expected = history.read()[-count:] if count else []
    assert history.tail(count) == expected


def test_tail_of_a_long_history_reads_only_its_end(
    history: HistoryFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    history.extend([msg(i, "x" * 500) for i in range(5_000)])  # ~2.7 MB
    assert [m.send_at for m in history.tail(3)] == [msg(i).send_at for i in (4997, 4998, 4999)]
    read_sizes: list[int] = []
    real_open = Path.open

    def spying_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        handle = real_open(self, *args, **kwargs)
        real_read = handle.read

        def read(size: int = -1) -> Any:
            data = real_read(size)
            read_sizes.append(len(data))
            return data

        handle.read = read
        return handle

    monkeypatch.setattr(Path, "open", spying_open)
    assert len(history.tail(24)) == 24
    assert 0 < sum(read_sizes) <= 128 * 1024


def test_tail_falls_back_on_a_torn_or_hand_edited_file(history: HistoryFile) -> None:
    history.extend([msg(i) for i in range(5)])
    with history.path.open("ab") as file:
        file.write(b'{"role":"user","con')  # a crash mid-append
    assert [m.content for m in history.tail(2)] == ["message 3", "message 4"]
    assert history.read_checked().repaired is False  # the fallback read repaired it already
    pretty = [{"role": "user", "content": f"pretty {i}", "send_at": i} for i in range(4)]
    history.path.write_text(json.dumps(pretty, indent=2))
    assert [m.content for m in history.tail(2)] == ["pretty 2", "pretty 3"]


def test_a_message_filed_by_a_catch_up_is_not_filed_again_by_its_writer(
    history: HistoryFile,
) -> None:
    history.append(msg(1))
    history.extend([msg(2), msg(3)])  # a catch-up files 2 and 3 while 3's writer is late
    history.append(msg(3))  # the late writer
    assert [m.id for m in history.read()] == [2, 3, 4]


def test_a_line_holds_every_field_in_declared_order() -> None:
    """A line is written field by field (not through asdict): a new field must reach it."""
    message = HistoryMessage("user", 'say "hi" 你好', 1_700_000_000_000, "Ann", 42)
    line = json.loads(message.to_json())
    assert list(line.items()) == list(asdict(message).items())
    assert HistoryMessage.from_obj(line) == message
