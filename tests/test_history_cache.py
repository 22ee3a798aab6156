"""The parsed-tail cache of history.json: it must save the parsing and never serve a stale tail."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.store.history_cache import TailCache, file_key
from gateway.store.history_file import TAILS, HistoryFile, HistoryMessage


def msg(i: int, text: str | None = None) -> HistoryMessage:
    return HistoryMessage("user", text or f"message {i}", 1_700_000_000_000 + i, "ann", id=i + 1)


@pytest.fixture
def history(tmp_path: Path) -> HistoryFile:
    directory = tmp_path / "cli-a"
    directory.mkdir()
    return HistoryFile(directory / "history.json")


def parsed_afresh(history: HistoryFile, count: int) -> list[HistoryMessage]:
    """The file's last `count` messages, parsed here without any cache."""
    if not history.path.exists():
        return []
    return [HistoryMessage(**obj) for obj in json.loads(history.path.read_bytes())][-count:]


def test_a_tail_after_our_own_appends_is_served_without_parsing(history: HistoryFile) -> None:
    history.extend([msg(i) for i in range(30)])
    assert history.tail(10) == parsed_afresh(history, 10)  # parsed, and remembered
    hits = TAILS.hits
    for i in range(30, 40):
        history.append(msg(i))
        assert history.tail(10) == parsed_afresh(history, 10)
    assert TAILS.hits == hits + 10
    assert history.tail(4) == parsed_afresh(history, 4)  # fewer than remembered: still known
    assert TAILS.hits == hits + 11


def test_a_young_session_stays_whole_until_it_outgrows_the_tail(history: HistoryFile) -> None:
    history.append(msg(0))
    assert history.tail(5) == [msg(0)]
    hits = TAILS.hits
    for i in range(1, 8):
        history.append(msg(i))
        assert history.tail(5) == parsed_afresh(history, 5)
    assert TAILS.hits == hits + 7


def test_another_process_appending_is_seen(history: HistoryFile) -> None:
    history.extend([msg(i) for i in range(5)])
    assert history.tail(3) == parsed_afresh(history, 3)
    script = (
        "import sys; from pathlib import Path\n"
        "from gateway.store.history_file import HistoryFile, HistoryMessage\n"
        "HistoryFile(Path(sys.argv[1])).append(HistoryMessage('user', 'from afar', 1, 'bo', 99))\n"
    )
    subprocess.run([sys.executable, "-c", script, str(history.path)], check=True)
    assert [m.content for m in history.tail(3)] == ["message 3", "message 4", "from afar"]


def test_rewrites_and_hand_edits_are_not_served_from_the_cache(history: HistoryFile) -> None:
    history.extend([msg(i) for i in range(6)])
    assert len(history.tail(4)) == 4
    history.replace([msg(100)])  # /reset, a trim or a repair: a new file under the name
    assert history.tail(4) == [msg(100)]
    history.extend([msg(101), msg(102)])
    assert [m.id for m in history.tail(4)] == [101, 102, 103]
    # An edit in place that keeps the inode (a text editor writing over the file).
    edited = history.path.read_bytes().replace(b"message 102", b"message 102, edited")
    history.path.write_bytes(edited)
    assert history.tail(4)[-1].content == "message 102, edited"


def test_a_torn_append_by_a_crashed_writer_is_not_hidden(history: HistoryFile) -> None:
    history.extend([msg(i) for i in range(4)])
    assert len(history.tail(2)) == 2
    with history.path.open("ab") as file:
        file.write(b'{"role":"user","con')  # another process died mid-append
    assert [m.content for m in history.tail(2)] == ["message 2", "message 3"]
    history.append(msg(4))  # repaired, then appended
    assert history.tail(2) == parsed_afresh(history, 2) == [msg(3), msg(4)]


def test_callers_may_change_the_list_they_get(history: HistoryFile) -> None:
    history.extend([msg(i) for i in range(5)])
    first = history.tail(3)
    first.clear()  # a task's context drops its own message from what it was given
    assert history.tail(3) == parsed_afresh(history, 3)


def test_random_interleavings_never_serve_a_stale_tail(tmp_path: Path) -> None:
    rng = random.Random(1234)
    directory = tmp_path / "cli-r"
    directory.mkdir()
    ours = HistoryFile(directory / "history.json", max_bytes=4_000)  # trims now and then
    theirs = HistoryFile(directory / "history.json", max_bytes=4_000)  # a second writer
    for i in range(600):
        action = rng.random()
        if action < 0.45:
            ours.append(msg(i, "x" * rng.randint(0, 80)))
        elif action < 0.6:
            TAILS.forget(str(theirs.path))  # as if from another process: its cache is its own
            theirs.append(msg(i))
        elif action < 0.62:
            ours.replace([msg(i)])
        count = rng.randint(1, 12)
        assert ours.tail(count) == parsed_afresh(ours, count), f"step {i}"


def test_the_cache_holds_a_bounded_number_of_tails(tmp_path: Path) -> None:
    cache = TailCache[HistoryMessage](lambda m: len(m.content), max_files=3)
    key = file_key(tmp_path.stat())
    for i in range(10):
        cache.put(f"/s/{i}", key, [msg(i)], want=5, whole=True)
    assert len(cache) == 3
    assert cache.get("/s/0", key, 1) is None
    assert cache.get("/s/9", key, 1) == [msg(9)]
    # Touching the oldest keeps it past the next insertion.
    assert cache.get("/s/7", key, 1) == [msg(7)]
    cache.put("/s/10", key, [msg(10)], want=5, whole=True)
    assert cache.get("/s/7", key, 1) == [msg(7)]
    assert cache.get("/s/8", key, 1) is None


def test_the_cache_holds_a_bounded_amount_of_text(tmp_path: Path) -> None:
    cache = TailCache[HistoryMessage](lambda m: len(m.content), max_chars=1_000)
    key = file_key(tmp_path.stat())
    for i in range(10):
        cache.put(f"/s/{i}", key, [msg(i, "x" * 300)], want=5, whole=False)
        assert cache.chars <= 1_000
    assert len(cache) == 3  # the three newest
    # An append moves the weight along: in with the new message, out with what falls off.
    newer = (key[0], key[1], key[2] + 60, key[3] + 1, key[4] + 1)  # the file, grown
    cache.appended("/s/9", key, newer, [msg(10, "y" * 50)])
    assert cache.chars == 300 + 300 + 350
    cache.put("/s/big", key, [msg(11, "z" * 5_000)], want=5, whole=False)
    assert cache.chars <= 1_000
    assert cache.get("/s/big", key, 1) is None  # larger than the whole budget: not kept
    assert len(cache) == 0 and cache.chars == 0  # it pushed out everything, then itself
