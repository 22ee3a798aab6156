"""What the Claude Code CLI says in `--output-format stream-json`, as the agent's steps.

Each stdout line is one JSON event. `CliRun` turns them into steps (streamed text, tool calls
and results, usage) and keeps what they tell about the run: the CLI session id, the answer,
whether anything reached the user, and why the run gave no answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
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


# The model the CLI names on a message it made up itself (an API error's text, not an answer).
SYNTHETIC_MODEL = "<synthetic>"


@dataclass
class CliRun:
    """What one CLI process produced."""

    model: str  # as asked for: an alias or a model id
    session_id: str = ""
    resolved_model: str = ""  # the model id the CLI resolved `model` to (its init event)
    produced: bool = False  # text or tool activity was passed on to the user
    turn_text: list[str] = field(default_factory=list)  # text since the last tool use
    answers: list[str] = field(default_factory=list)  # each result's text, in order
    reply: str = ""
    tool_names: dict[str, str] = field(default_factory=dict)
    call_ids: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None  # the last result (a background subagent's report
    # brings another turn, hence another result)
    synthetic: list[str] = field(default_factory=list)  # the CLI's own error texts
    denials: list[dict[str, Any]] = field(default_factory=list)  # tools it refused to run
    # Tokens per model since the process started, from each result's own share
    # (`model_usage_since_last_result`); None while no result had one.
    spent: dict[str, Usage] | None = None
    failure: str = ""

    def absorb(self, event: dict[str, Any], *, elapsed_ms: int) -> list[Step]:
        """The steps one event stands for; `elapsed_ms` is the run's time so far."""
        kind = event.get("type")
        if kind == "system":
            self._system(event)
            return []
        if kind == "result":
            self._result(event)
            return []
        if kind not in ("assistant", "user"):
            return []
        message = event.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            return []
        blocks = message["content"]
        if kind == "assistant" and message.get("model") == SYNTHETIC_MODEL:
            # "API Error: 400 …" and the like: why the run failed, never part of the answer.
            self.synthetic += [str(b.get("text") or "") for b in blocks if isinstance(b, dict)]
            return []
        # Text of a subagent (the CLI's Task tool) is its report to the CLI, not the answer.
        nested = bool(event.get("parent_tool_use_id"))
        steps: list[Step] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")  # `thinking` blocks are never shown
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

    def _system(self, event: dict[str, Any]) -> None:
        subtype = event.get("subtype")
        if subtype == "init":
            if isinstance(event.get("session_id"), str):
                self.session_id = event["session_id"]
            if isinstance(event.get("model"), str):
                self.resolved_model = event["model"]
        elif subtype == "background_tasks_changed" and isinstance(event.get("tasks"), list):
            self.background = {str(t.get("task_id")) for t in event["tasks"] if isinstance(t, dict)}
        elif subtype == "task_started" and event.get("is_backgrounded"):
            self.background.add(str(event.get("task_id")))
        elif subtype == "task_notification":
            self.background.discard(str(event.get("task_id")))

    def _result(self, event: dict[str, Any]) -> None:
        self.result = event
        if isinstance(event.get("session_id"), str):
            self.session_id = event["session_id"]
        denials = event.get("permission_denials")
        if isinstance(denials, list):
            self.denials += [d for d in denials if isinstance(d, dict) and d not in self.denials]
        since = event.get("model_usage_since_last_result")
        if isinstance(since, dict):
            spent = self.spent if self.spent is not None else {}
            for name, tokens in since.items():
                if isinstance(tokens, dict):
                    spent[str(name)] = _add(
                        spent.get(str(name)), _row(str(name), tokens, camel=True)
                    )
            self.spent = spent
        if event.get("is_error"):
            return  # its text is the CLI's error message (`failure` tells it), not an answer
        text = event.get("result")
        answer = (text if isinstance(text, str) and text else "".join(self.turn_text)).strip()
        self.turn_text.clear()
        if answer:
            self.answers.append(answer)
        self.reply = "\n\n".join(self.answers)

    def usage(self, elapsed_ms: int) -> list[Usage]:
        """The run's token spend, one row per model it used (subagents' models included).

        Per model, under the model id each resolved to, and subagents' calls included: what
        each result says was spent since the one before. `modelUsage` has that too, but on a
        resumed session it adds the earlier processes' spend; `usage` has only the main
        thread's. A CLI that gives neither share is read from them, in that order. A run that
        spent nothing (it failed before any call) has no row."""
        result = self.result or {}
        duration = result.get("duration_ms")
        elapsed = _count(duration) if duration is not None else elapsed_ms
        per_model = result.get("modelUsage")
        rows: list[Usage] = []
        if self.spent is not None:
            rows = list(self.spent.values())
        elif isinstance(per_model, dict) and per_model:
            for name, tokens in per_model.items():
                if isinstance(tokens, dict):
                    rows.append(_row(str(name), tokens, camel=True))
        elif isinstance(result.get("usage"), dict):
            rows.append(_row(self.resolved_model or self.model, result["usage"], camel=False))
        rows = [r for r in rows if r.input or r.output or r.cache_read or r.cache_write]
        if not rows:
            return []
        # The run's time and tool calls go with the main model's row (the first otherwise).
        main = next((i for i, r in enumerate(rows) if r.model == self.resolved_model), 0)
        rows[main] = replace(rows[main], elapsed_ms=elapsed, tool_calls=tuple(self.call_ids))
        return rows

    def ended(self, code: int | None, stderr: str) -> None:
        """The process is done (`code` None: it had to be stopped): say why there is no answer."""
        self.failure = _failure(self.result, code, stderr, self.synthetic)


def _add(earlier: Usage | None, more: Usage) -> Usage:
    if earlier is None:
        return more
    return replace(
        earlier,
        input=earlier.input + more.input,
        output=earlier.output + more.output,
        cache_read=earlier.cache_read + more.cache_read,
        cache_write=earlier.cache_write + more.cache_write,
    )


def _row(model: str, tokens: dict[str, Any], *, camel: bool) -> Usage:
    keys = (
        ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
        if camel
        else (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        )
    )
    fresh, output, read, written = (_count(tokens.get(k)) for k in keys)
    # Cache writes are billed input the model read for the first time, so they count in.
    return Usage(
        model=model, input=fresh + written, output=output, cache_read=read, cache_write=written
    )


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


def _failure(
    result: dict[str, Any] | None, code: int | None, stderr: str, synthetic: list[str]
) -> str:
    """Why the run gave no answer, for the user; "" when it did."""
    if result is not None and (result.get("is_error") or result.get("subtype") != "success"):
        detail = result.get("result") or result.get("errors") or "; ".join(synthetic)
        detail = detail or result.get("subtype")
        if isinstance(detail, list):
            detail = "; ".join(str(d) for d in detail)
        status = result.get("api_error_status")
        refused = f" (the model API answered HTTP {status})" if status else ""
        message = f"Claude Code failed{refused}: {detail}"
    elif code is not None and code < 0:
        message = f"the Claude Code CLI was killed by signal {-code}"
    elif code:
        message = f"the Claude Code CLI exited with status {code}"
    elif result is None:
        message = "the Claude Code CLI ended without an answer"
    else:
        return ""  # answered (a CLI that had to be stopped after its answer still answered)
    return f"{message} ({stderr})" if stderr else message
