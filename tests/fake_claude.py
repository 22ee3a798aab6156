#!/usr/bin/env python3
"""A stand-in for the Claude Code CLI in `-p --output-format stream-json --verbose` mode.

Every call appends `{argv, cwd, stdin, pid, session_id}` to the JSONL file named by
`FAKE_CLAUDE_LOG`, then answers `echo: <last line of stdin>` as two assistant messages and a
result with fixed usage. Words in the prompt pick other behaviours:

- `!tool`     two CLI tool calls first: Bash (ok) and Read (an error)
- `!garbage`  lines that are not JSON objects among the events
- `!fail`     an error result, something on stderr, exit status 1
- `!crash`    many lines on stderr, no result, exit status 3
- `!sleep`    nothing after the init event until it is killed
- `!stubborn` like `!sleep`, and SIGTERM is ignored
- `!busy`     some text, then nothing until it is killed

`--resume ID` continues session ID, unless ID is listed in `FAKE_CLAUDE_FORGET` (comma-separated):
then it fails like the real CLI does for a session it does not know.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from typing import Any


def emit(event: dict[str, Any] | str) -> None:
    line = event if isinstance(event, str) else json.dumps(event)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "assistant",
        "message": {"role": "assistant", "content": list(blocks)},
        "parent_tool_use_id": None,
    }


def tool_result(tool_use_id: str, content: object, *, is_error: bool) -> dict[str, Any]:
    """The CLI reports a tool's output as a user message holding a tool_result block."""
    block = {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": content,
        "is_error": is_error,
    }
    return {"type": "user", "message": {"role": "user", "content": [block]}}


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def main() -> int:
    argv = sys.argv[1:]
    prompt = sys.stdin.read()
    resume = option(argv, "--resume")
    forgotten = set(filter(None, os.environ.get("FAKE_CLAUDE_FORGET", "").split(",")))
    session_id = resume or str(uuid.uuid4())
    if "!stubborn" in prompt:
        # Before the call is logged: a test that saw the call may count on SIGTERM being ignored.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.environ["FAKE_CLAUDE_LOG"], "a", encoding="utf-8") as log:
        entry = {
            "argv": argv,
            "cwd": os.getcwd(),
            "stdin": prompt,
            "pid": os.getpid(),
            "session_id": session_id,
        }
        log.write(json.dumps(entry) + "\n")

    if "--max-turns" in argv and os.environ.get("FAKE_CLAUDE_FAIL_SUMMARY"):
        sys.stderr.write("fake claude: no summaries today\n")
        return 2
    if resume is not None and resume in forgotten:
        sys.stderr.write(f"No conversation found with session ID: {resume}\n")
        return 1
    emit({"type": "system", "subtype": "init", "session_id": session_id, "model": "fake"})
    if "!garbage" in prompt:
        emit("this is not json")
        emit("[1, 2, 3]")
    if "!crash" in prompt:
        for n in range(200):
            sys.stderr.write(f"stack frame {n}\n")
        sys.stderr.write("fatal: the fake crashed\n")
        return 3
    if "!busy" in prompt:
        emit(assistant({"type": "text", "text": "working on it"}))
    if any(word in prompt for word in ("!sleep", "!stubborn", "!busy")):
        while True:
            time.sleep(60)
    if "!fail" in prompt:
        sys.stderr.write("fake claude: boom\n")
        emit(
            {
                "type": "result",
                "subtype": "error_during_execution",
                "is_error": True,
                "result": "simulated failure",
                "session_id": session_id,
                "usage": {"input_tokens": 3, "output_tokens": 0},
                "duration_ms": 5,
            }
        )
        return 1

    tool_ids: list[str] = []
    if "!tool" in prompt:
        tool_ids = ["toolu_1", "toolu_2"]
        emit(
            assistant(
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
            )
        )
        emit(tool_result("toolu_1", "notes.txt", is_error=False))
        read = {"file_path": "missing.txt"}
        emit(assistant({"type": "tool_use", "id": "toolu_2", "name": "Read", "input": read}))
        missing = [{"type": "text", "text": "File does not exist."}]
        emit(tool_result("toolu_2", missing, is_error=True))

    last = prompt.strip().splitlines()[-1] if prompt.strip() else ""
    emit(assistant({"type": "text", "text": "echo: "}))
    emit(assistant({"type": "text", "text": last}))
    emit(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": f"echo: {last}",
            "session_id": session_id,
            "num_turns": 1 + len(tool_ids),
            "duration_ms": 1234,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 40,
            },
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
