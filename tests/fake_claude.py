#!/usr/bin/env python3
"""A stand-in for the Claude Code CLI in `-p --output-format stream-json --verbose` mode.

It behaves like the real CLI (2.1.x) where the gateway depends on it: unknown options and
stream-json without `--verbose` are refused with status 1; every content block is an event of
its own (a `thinking` block opens the turn when `--effort` is given); an alias resolves to a
model id (`init`'s `model`, `modelUsage`'s keys); results carry `is_error`,
`api_error_status`, `modelUsage` and `permission_denials`; an API failure is a `<synthetic>`
assistant message; a tool that needs permission is asked through the `--permission-prompt-tool`
of the `--mcp-config` server (spoken to over stdio, as the CLI does), refused without one.

Every call appends `{argv, cwd, stdin, pid, session_id}` to the JSONL file named by
`FAKE_CLAUDE_LOG`, then answers `echo: <last line of stdin>`. Words in the prompt pick other
behaviours:

- `!tool`     two CLI tool calls first: Bash (ok) and Read (an error)
- `!write`    a Write of `notes.txt` (content `hello`) in the working directory: needs permission
- `!env`      a Bash call printing the environment: needs permission
- `!redirect` a Bash call writing `out.txt` by redirection: needs permission
- `!mcp`      a call of the `add` tool (2 + 3) of the configured MCP server `fake`: needs
              permission
- `!agent`    a background subagent (its `task_*` events); its tokens count under the haiku
              model; two results, the second after the subagent reported
- `!maxturns` an `error_max_turns` result
- `!garbage`  lines that are not JSON objects among the events
- `!fail`     an error result, something on stderr, exit status 1
- `!crash`    many lines on stderr, no result, exit status 3
- `!sleep`    nothing after the init event until it is killed
- `!stubborn` like `!sleep`, and SIGTERM is ignored
- `!busy`     some text, then nothing until it is killed

`--resume ID` continues session ID, unless ID is listed in `FAKE_CLAUDE_FORGET` (comma-separated):
then it fails like the real CLI does for a session it does not know; or in
`FAKE_CLAUDE_API_ERROR`: then the model API refuses the resumed conversation (HTTP 400).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

VALUED = {
    "--output-format",
    "--model",
    "--append-system-prompt",
    "--resume",
    "--allowedTools",
    "--effort",
    "--max-turns",
    "--permission-prompt-tool",
    "--tools",
}
VARIADIC = {"--mcp-config"}
FLAGS = {"-p", "--print", "--verbose", "--strict-mcp-config", "--no-session-persistence"}
ALIASES = {"sonnet": "claude-sonnet-5-5", "haiku": "claude-haiku-4-5", "opus": "claude-opus-5"}
SUBAGENT_MODEL = ALIASES["haiku"]
NEEDS_PERMISSION = {"Write", "Bash", "Edit"}


def emit(event: dict[str, Any] | str) -> None:
    line = event if isinstance(event, str) else json.dumps(event)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def assistant(block: dict[str, Any], model: str, parent: str | None = None) -> dict[str, Any]:
    """One content block per event, as the real CLI prints them."""
    message = {"role": "assistant", "model": model, "content": [block]}
    return {"type": "assistant", "message": message, "parent_tool_use_id": parent}


def tool_result(tool_use_id: str, content: object, *, is_error: bool) -> dict[str, Any]:
    """The CLI reports a tool's output as a user message holding a tool_result block."""
    block = {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": content,
        "is_error": is_error,
    }
    return {"type": "user", "message": {"role": "user", "content": [block]}}


def parse(argv: list[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    at = 0
    while at < len(argv):
        arg = argv[at]
        at += 1
        if arg in FLAGS:
            options[arg] = ""
        elif arg in VARIADIC:
            # Every value up to the next option (the CLI takes several config files).
            values = []
            while at < len(argv) and not argv[at].startswith("-"):
                values.append(argv[at])
                at += 1
            if not values:
                fail_usage(f"error: option '{arg} <values...>' argument missing")
            options[arg] = "\n".join(values)
        elif arg in VALUED:
            if at >= len(argv):
                fail_usage(f"error: option '{arg} <value>' argument missing")
            options[arg] = argv[at]
            at += 1
        else:
            fail_usage(f"error: unknown option '{arg}'")
    if options.get("--output-format") == "stream-json" and "--verbose" not in options:
        fail_usage("Error: When using --print, --output-format=stream-json requires --verbose")
    return options


def fail_usage(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.exit(1)


def ask_permission(options: dict[str, str], tool: str, args: dict[str, Any], call_id: str) -> str:
    """Nothing ("") when allowed, else the refusal the CLI puts in the tool result."""
    if tool in set(options.get("--allowedTools", "").split(",")):
        return ""
    prompt_tool = options.get("--permission-prompt-tool")
    if not prompt_tool:
        return f"Claude requested permissions to use {tool}, but you haven't granted it yet."
    _, server, name = prompt_tool.split("__", 2)
    entry = mcp_servers(options)[server]
    answer = json.loads(
        mcp_call(entry, name, {"tool_name": tool, "input": args, "tool_use_id": call_id})
    )
    return "" if answer["behavior"] == "allow" else str(answer["message"])


def mcp_servers(options: dict[str, str]) -> dict[str, Any]:
    """Every server of the `--mcp-config` files, by name."""
    entries: dict[str, Any] = {}
    for path in filter(None, options.get("--mcp-config", "").split("\n")):
        with open(path, encoding="utf-8") as config:
            entries.update(json.load(config)["mcpServers"])
    return entries


def mcp_call(entry: dict[str, Any], tool: str, arguments: dict[str, Any]) -> str:
    """One tool call to a stdio MCP server: initialize, then tools/call; the text answered."""
    env = {**os.environ, **entry.get("env", {})}
    with subprocess.Popen(
        [entry["command"], *entry.get("args", [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    ) as server:
        assert server.stdin is not None and server.stdout is not None

        def send(message: dict[str, Any]) -> None:
            server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")  # type: ignore[union-attr]
            server.stdin.flush()  # type: ignore[union-attr]

        def answer(request_id: int) -> dict[str, Any]:
            for line in server.stdout:  # type: ignore[union-attr]
                message = json.loads(line)
                if message.get("id") == request_id:
                    return dict(message["result"])
            raise RuntimeError("the MCP server ended without answering")

        client = {"name": "fake-claude", "version": "0"}
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
        send({"id": 1, "method": "initialize", "params": init})
        answer(1)
        send({"method": "notifications/initialized"})
        send({"id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
        result = answer(2)
        server.stdin.close()
        server.wait(10)
    if "structuredContent" in result:
        # The CLI hands the model a tool's structured result, when it has one, as compact JSON.
        return json.dumps(result["structuredContent"], separators=(",", ":"))
    return str(result["content"][0]["text"])


def main() -> int:
    argv = sys.argv[1:]
    options = parse(argv)
    prompt = sys.stdin.read()
    resume = options.get("--resume")
    forgotten = set(filter(None, os.environ.get("FAKE_CLAUDE_FORGET", "").split(",")))
    refused = set(filter(None, os.environ.get("FAKE_CLAUDE_API_ERROR", "").split(",")))
    session_id = resume or str(uuid.uuid4())
    requested = options.get("--model", "sonnet")
    model = ALIASES.get(requested, requested)
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

    if "--max-turns" in options and os.environ.get("FAKE_CLAUDE_FAIL_SUMMARY"):
        sys.stderr.write("fake claude: no summaries today\n")
        return 2
    if resume is not None and resume in forgotten:
        # No init event: a result that spent nothing, the reason in `errors` and on stderr.
        reason = f"No conversation found with session ID: {resume}"
        sys.stderr.write(reason + "\n")
        zero = dict.fromkeys(("input_tokens", "output_tokens"), 0)
        emit(
            {
                "type": "result",
                "subtype": "error_during_execution",
                "is_error": True,
                "result": None,
                "errors": [reason],
                "session_id": str(uuid.uuid4()),
                "usage": zero,
                "modelUsage": {},
                "model_usage_since_last_result": None,
                "permission_denials": [],
            }
        )
        return 1
    emit({"type": "system", "subtype": "init", "session_id": session_id, "model": model})
    if resume is not None and resume in refused:
        text = "API Error: 400 messages.1.content.0: unexpected `tool_use_id`"
        emit(assistant({"type": "text", "text": text}, "<synthetic>"))
        emit(result(session_id, text, Spend(session_id), [], is_error=True, api_error_status=400))
        return 1
    if "!garbage" in prompt:
        emit("this is not json")
        emit("[1, 2, 3]")
    if "!crash" in prompt:
        for n in range(200):
            sys.stderr.write(f"stack frame {n}\n")
        sys.stderr.write("fatal: the fake crashed\n")
        return 3
    if "!busy" in prompt:
        emit(assistant({"type": "text", "text": "working on it"}, model))
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
                "modelUsage": {},
                "duration_ms": 5,
            }
        )
        return 1
    spend = Spend(session_id)
    if "!maxturns" in prompt:
        spend.add(model, 10, 5)
        emit(result(session_id, None, spend, [], subtype="error_max_turns"))
        return 0

    if "--effort" in options:
        thought = {"type": "thinking", "thinking": "Let me think.", "signature": "sig"}
        emit(assistant(thought, model))
    tool_ids: list[str] = []
    denials: list[dict[str, Any]] = []
    if "!tool" in prompt:
        tool_ids = ["toolu_1", "toolu_2"]
        emit(assistant({"type": "text", "text": "Let me look."}, model))
        bash = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
        emit(assistant(bash, model))
        emit(tool_result("toolu_1", "notes.txt", is_error=False))
        read = {"file_path": "missing.txt"}
        emit(assistant({"type": "tool_use", "id": "toolu_2", "name": "Read", "input": read}, model))
        missing = [{"type": "text", "text": "File does not exist."}]
        emit(tool_result("toolu_2", missing, is_error=True))
    for word, tool, args in (
        ("!write", "Write", {"file_path": os.path.abspath("notes.txt"), "content": "hello\n"}),
        ("!env", "Bash", {"command": "env"}),
        ("!redirect", "Bash", {"command": "echo hi > out.txt"}),
        ("!mcp", "mcp__fake__add", {"a": 2, "b": 3}),
    ):
        if word not in prompt or (options.get("--tools") == "" and "--tools" in options):
            continue
        call_id = f"toolu_{word[1:]}"
        tool_ids.append(call_id)
        emit(assistant({"type": "tool_use", "id": call_id, "name": tool, "input": args}, model))
        refusal = ask_permission(options, tool, args, call_id)
        if refusal:
            denials.append({"tool_name": tool, "tool_use_id": call_id, "tool_input": args})
            emit(tool_result(call_id, refusal, is_error=True))
        elif tool == "Write":
            with open(str(args["file_path"]), "w", encoding="utf-8") as out:
                out.write(str(args["content"]))
            emit(
                tool_result(
                    call_id, f"File created successfully at: {args['file_path']}", is_error=False
                )
            )
        elif tool.startswith("mcp__"):
            _, server, name = tool.split("__", 2)
            emit(
                tool_result(
                    call_id, mcp_call(mcp_servers(options)[server], name, args), is_error=False
                )
            )
        else:
            command = ["sh", "-c", str(args["command"])]
            shown = subprocess.run(command, capture_output=True, text=True, check=False).stdout
            emit(tool_result(call_id, shown, is_error=False))

    last = prompt.strip().splitlines()[-1] if prompt.strip() else ""
    spend.add(model, 10, 5, read=100, written=40)
    if "!agent" in prompt:
        agent_call(session_id, model, spend, tool_ids)
    emit(assistant({"type": "text", "text": "echo: "}, model))
    emit(assistant({"type": "text", "text": last}, model))
    emit(result(session_id, f"echo: {last}", spend, denials, turns=1 + len(tool_ids)))
    return 0


def agent_call(session_id: str, model: str, spend: Spend, tool_ids: list[str]) -> None:
    """A subagent in the background: the first result comes while it runs, the answer after
    its report; its tokens are spent under its own model."""
    call = {"description": "count", "prompt": "count the files", "subagent_type": "Explore"}
    tool_ids.append("toolu_agent")
    emit(
        assistant({"type": "tool_use", "id": "toolu_agent", "name": "Agent", "input": call}, model)
    )
    task = {"task_id": "a1", "tool_use_id": "toolu_agent", "description": "count"}
    emit({"type": "system", "subtype": "background_tasks_changed", "tasks": [task]})
    emit({"type": "system", "subtype": "task_started", "is_backgrounded": True, **task})
    emit(tool_result("toolu_agent", "Async agent launched successfully.", is_error=False))
    emit(assistant({"type": "text", "text": "Counting in the background."}, model))
    emit(result(session_id, "Counting in the background.", spend, [], turns=1))
    report = {"type": "text", "text": "There are 3 files."}
    emit(assistant(report, SUBAGENT_MODEL, parent="toolu_agent"))
    spend.add(SUBAGENT_MODEL, 7, 3)
    emit({"type": "system", "subtype": "task_notification", "status": "completed", **task})
    emit({"type": "system", "subtype": "background_tasks_changed", "tasks": []})


class Spend:
    """Tokens spent, as the CLI counts them: `model_usage_since_last_result` is what was spent
    since the previous result, `modelUsage` everything the session spent, earlier processes'
    included (kept next to the call log, per session)."""

    def __init__(self, session_id: str) -> None:
        self.path = os.environ["FAKE_CLAUDE_LOG"] + ".usage"
        self.session_id = session_id
        self.since: dict[str, dict[str, int]] = {}

    def add(self, model: str, fresh: int, output: int, *, read: int = 0, written: int = 0) -> None:
        counts = self.since.setdefault(model, dict.fromkeys(COUNTS, 0))
        for key, value in zip(COUNTS, (fresh, output, read, written), strict=True):
            counts[key] += value

    def take(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(since the last result, the session's total), as a result reports them."""
        since, self.since = self.since, {}
        totals = {}
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as kept:
                totals = json.load(kept)
        total = totals.setdefault(self.session_id, {})
        for model, counts in since.items():
            kept_counts = total.setdefault(model, dict.fromkeys(COUNTS, 0))
            for key in COUNTS:
                kept_counts[key] += counts[key]
        with open(self.path, "w", encoding="utf-8") as out:
            json.dump(totals, out)
        return since, total


COUNTS = ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")


def result(
    session_id: str,
    text: str | None,
    spend: Spend,
    denials: list[dict[str, Any]],
    *,
    turns: int = 1,
    subtype: str = "success",
    is_error: bool = False,
    api_error_status: int | None = None,
) -> dict[str, Any]:
    since, total = spend.take()
    # `usage` is the main thread's only (the first model's); the others hold every model.
    main: dict[str, Any] = next(iter(since.values()), {})
    return {
        "type": "result",
        "subtype": subtype,
        "is_error": is_error,
        "api_error_status": api_error_status,
        "result": text,
        "session_id": session_id,
        "num_turns": turns,
        "duration_ms": 1234,
        "usage": {
            "input_tokens": main.get("inputTokens", 0),
            "output_tokens": main.get("outputTokens", 0),
            "cache_read_input_tokens": main.get("cacheReadInputTokens", 0),
            "cache_creation_input_tokens": main.get("cacheCreationInputTokens", 0),
        },
        "modelUsage": total,
        "model_usage_since_last_result": since,
        "permission_denials": denials,
    }


if __name__ == "__main__":
    sys.exit(main())
