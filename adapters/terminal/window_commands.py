"""The commands the chat window answers itself, and its help, which lists the gateway's too."""

from __future__ import annotations

from typing import Any

from adapters.terminal.completion import CommandHint, Completer
from adapters.terminal.picker import short_id
from adapters.terminal.plain import line
from adapters.terminal.widgets import describe_confirm

CLIENT_HELP = """**Window commands**

- `/switch [name]` or Ctrl+S: pick another session (by name or id when given)
- `/new`: start a new terminal session
- `/name <text>`: rename this session
- `/pending`: prompts waiting for you in any session; `/approve N`, `/deny N`,
  `/answer N text` answer one of them
- `/cancel`: cancel the running task started from this window
- `/attach PATH`: send a file (an image, a voice note…) with your next message
- `/quit` or Ctrl+Q: leave (tasks go on in the gateway)

Enter sends; Ctrl+J adds a line; Up and Down walk your input history; Tab completes a
`/command`."""
# The commands the window answers itself, for Tab completion (the gateway's come from it).
WINDOW_COMMANDS = (
    CommandHint("switch", "pick another session", "[name]"),
    CommandHint("new", "start a new terminal session"),
    CommandHint("name", "rename this session", "<text>"),
    CommandHint("pending", "prompts waiting for you in any session"),
    CommandHint("approve", "approve prompt N of the /pending list", "N"),
    CommandHint("deny", "deny prompt N of the /pending list", "N"),
    CommandHint("answer", "answer question N of the /pending list", "N <text>"),
    CommandHint("cancel", "cancel the task this window started"),
    CommandHint("attach", "send a file with your next message", "PATH"),
    CommandHint("help", "this help"),
    CommandHint("quit", "leave (tasks go on in the gateway)"),
)


def help_text(completer: Completer) -> str:
    gateway = "\n".join(f"- `{hint.shown}`: {hint.summary}" for hint in completer.gateway_hints())
    return f"{CLIENT_HELP}\n\n**Gateway commands**\n\n{gateway}" if gateway else CLIENT_HELP


def pending_list(prompts: list[dict[str, Any]], window_hash: str) -> str:
    """`/pending`: the confirmations and questions waiting for an answer, numbered for
    `/approve N`, `/deny N` and `/answer N text`."""
    lines = ["Waiting for you (/approve N, /deny N, /answer N text):"]
    for number, prompt in enumerate(prompts, 1):
        if prompt.get("kind") == "confirm":
            what = describe_confirm(prompt.get("tool", ""), prompt.get("args", {}))
        else:
            what = f"question: {prompt.get('question', '')}"
        origin = prompt.get("origin", {})
        here = origin.get("window_hash") == window_hash
        who = "this window" if here else origin.get("sender_name") or origin.get("platform")
        lines.append(f"{number}. {short_id(prompt['session_id'])} {line(what)} ({line(who)})")
    return "\n".join(lines)
