"""What the Claude Code CLI says in `--output-format stream-json`, as the agent's steps.

Each stdout line is one JSON event. `CliRun` turns them into steps (streamed text, tool calls
and results, usage) and keeps what they tell about the run: the CLI session id, the answer,
whether anything reached the user, and why the run gave no answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway.agents.base import Delta, Step, ToolCall, ToolResult, Usage
from gateway.logs import get_logger

log = get_logger(__name__)

# Tool output is journaled, logged and sent to clients, so it is cut; the CLI saw all of it.
TOOL_RESULT_CHARS = 8000


def parse_line(line: bytes) -> dict[str, Any] | None:
    """One stdout line as an event; None for a blank line or one that is not a JSON object."""
    text = line.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        event = json.loads(text)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        log.warning("skipped an unparseable line from the Claude Code CLI", line=text[:200])
        return None
    return event


@dataclass
class CliRun:
    """What one CLI process produced."""

    model: str
    session_id: str = ""
    produced: bool = False  # text or tool activity was passed on to the user
    turn_text: list[str] = field(default_factory=list)  # text since the last tool use
    reply: str = ""
    tool_names: dict[str, str] = field(default_factory=dict)
    call_ids: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None
    failure: str = ""

    def absorb(self, event: dict[str, Any], *, elapsed_ms: int) -> list[Step]:
        """The steps one event stands for; `elapsed_ms` is the run's time so far."""
        kind = event.get("type")
        if kind == "system":
            if event.get("subtype") == "init" and isinstance(event.get("session_id"), str):
                self.session_id = event["session_id"]
            return []
        if kind == "result":
            self.result = event
            if isinstance(event.get("session_id"), str):
                self.session_id = event["session_id"]
            text = event.get("result")
            reply = text if isinstance(text, str) and text else "".join(self.turn_text)
            self.reply = reply.strip()
            return [self._usage(event, elapsed_ms)]
        if kind not in ("assistant", "user"):
            return []
        message = event.get("message")
        blocks = message.get("content") if isinstance(message, dict) else None
        if not isinstance(blocks, list):
            return []
        # Text of a subagent (the CLI's Task tool) is its report to the CLI, not the answer.
        nested = bool(event.get("parent_tool_use_id"))
        steps: list[Step] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if kind == "assistant" and btype == "text" and not nested:
                text = str(block.get("text") or "")
                if text:
                    self.turn_text.append(text)
                    steps.append(Delta(text))
            elif kind == "assistant" and btype == "tool_use":
                call_id, tool = str(block.get("id") or ""), str(block.get("name") or "tool")
                raw = block.get("input")
                self.tool_names[call_id] = tool
                self.call_ids.append(call_id)
                if not nested:
                    self.turn_text.clear()
                steps.append(ToolCall(call_id, tool, raw if isinstance(raw, dict) else {}))
            elif kind == "user" and btype == "tool_result":
                call_id = str(block.get("tool_use_id") or "")
                status = "error" if block.get("is_error") else "ok"
                tool = self.tool_names.get(call_id, "tool")
                steps.append(ToolResult(call_id, tool, status, _tool_text(block.get("content"))))
        self.produced = self.produced or bool(steps)
        return steps

    def _usage(self, result: dict[str, Any], elapsed_ms: int) -> Usage:
        usage = result.get("usage")
        tokens: dict[str, Any] = usage if isinstance(usage, dict) else {}
        written = _count(tokens.get("cache_creation_input_tokens"))
        duration = result.get("duration_ms")
        return Usage(
            model=self.model,
            # Cache writes are billed input the model read for the first time, so they count in.
            input=_count(tokens.get("input_tokens")) + written,
            output=_count(tokens.get("output_tokens")),
            cache_read=_count(tokens.get("cache_read_input_tokens")),
            cache_write=written,
            elapsed_ms=_count(duration) if duration is not None else elapsed_ms,
            tool_calls=tuple(self.call_ids),
        )

    def ended(self, code: int | None, stderr: str) -> None:
        """The process is done (`code` None: it had to be stopped): say why there is no answer."""
        self.failure = _failure(self.result, code, stderr)


def _count(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _tool_text(content: object) -> str:
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text") or ""))
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type') or 'content'}]")
        text = "\n".join(parts)
    elif content is None:
        text = ""
    else:
        text = json.dumps(content, ensure_ascii=False)
    if len(text) > TOOL_RESULT_CHARS:
        text = f"{text[:TOOL_RESULT_CHARS]}… ({len(text) - TOOL_RESULT_CHARS} more characters)"
    return text


def _failure(result: dict[str, Any] | None, code: int | None, stderr: str) -> str:
    """Why the run gave no answer, for the user; "" when it did."""
    if result is not None and (result.get("is_error") or result.get("subtype") != "success"):
        detail = result.get("result") or result.get("errors") or result.get("subtype")
        if isinstance(detail, list):
            detail = "; ".join(str(d) for d in detail)
        message = f"Claude Code failed: {detail}"
    elif code is not None and code < 0:
        message = f"the Claude Code CLI was killed by signal {-code}"
    elif code:
        message = f"the Claude Code CLI exited with status {code}"
    elif result is None:
        message = "the Claude Code CLI ended without an answer"
    else:
        return ""  # answered (a CLI that had to be stopped after its answer still answered)
    return f"{message} ({stderr})" if stderr else message
