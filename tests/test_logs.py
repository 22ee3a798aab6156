from __future__ import annotations

import json
import logging

import pytest

from gateway.logs import configure_logging, get_logger
from gateway.settings import LogFormat


def test_json_format_covers_our_logs_and_library_logs(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", LogFormat.json)
    try:
        get_logger("gateway.test").info("session created", session="cli-a")
        logging.getLogger("some.library").warning("library says %s", "hello")
        get_logger("gateway.test").debug("hidden below the level")
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    finally:
        configure_logging("WARNING", LogFormat.console)
    assert [entry["event"] for entry in lines] == ["session created", "library says hello"]
    assert lines[0]["session"] == "cli-a" and lines[0]["level"] == "info"
    assert lines[1]["level"] == "warning" and lines[1]["logger"] == "some.library"
    assert all("timestamp" in entry for entry in lines)
