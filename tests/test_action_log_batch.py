"""Lines of one task written together (its reply and `done`, back to back at its end) are each
a line of their own, in order, in one write; a rotation after them keeps them whole."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gateway.store.action_record import parse_line
from gateway.store.actionlog import ActionLog


def test_lines_written_together_are_each_their_own_in_order(tmp_path: Path) -> None:
    log = ActionLog(tmp_path / "action.log")
    log.append("user", '{"text": "hi"}', task_hash="a" * 16)
    at = datetime(2026, 12, 6, tzinfo=UTC)
    records = log.append_all(
        [("text", '{"text": "echo: hi"}'), ("done", '{"text": "echo: hi"}')],
        task_hash="a" * 16,
        identity="http:ann",
        at=at,
    )
    lines = (tmp_path / "action.log").read_text().splitlines()
    assert len(lines) == 3
    read = [parse_line(line) for line in lines[1:]]
    assert [r.kind for r in read if r] == ["text", "done"] == [r.kind for r in records]
    assert all(r is not None and r.identity == "http:ann" and r.at == at for r in read)


def test_a_part_line_left_by_a_crash_does_not_swallow_a_batch(tmp_path: Path) -> None:
    path = tmp_path / "action.log"
    log = ActionLog(path)
    log.append("user", '{"text": "hi"}', task_hash="b" * 16)
    with path.open("ab") as file:
        file.write(b"2026-12-06T00:00:00Z half a li")  # a crash in the middle of a write
    log.append_all([("text", "{}"), ("done", "{}")], task_hash="b" * 16)
    lines = path.read_text().splitlines()
    kinds = [parse_line(line) for line in (lines[0], lines[2], lines[3])]
    assert [r.kind if r else None for r in kinds] == [
        "user",
        "text",
        "done",
    ]
    assert lines[1].startswith("2026-12-06T00:00:00Z half")
