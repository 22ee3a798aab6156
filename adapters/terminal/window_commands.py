"""The commands the chat window answers itself, and its help, which lists the gateway's too."""

from __future__ import annotations

from adapters.terminal.completion import CommandHint, Completer

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
