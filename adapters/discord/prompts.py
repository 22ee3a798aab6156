"""What the bot itself says on Discord, with every part a person or a model chose shown as
typed: a display name, a tool's arguments, a question or an answer with `**`, `[x](url)` or
`@everyone` in it reads as those characters, never as bold text, a masked link or a mention.

The agent's replies are Markdown on purpose and are not escaped here; what keeps them (and
everything else the bot posts) from pinging anyone is `NO_MENTIONS` (adapters.discord.client).
"""

from __future__ import annotations

from discord.utils import escape_markdown, escape_mentions

from gateway.events import AskUserEvent, ConfirmEvent


def literal(text: str) -> str:
    """`text` as Discord shows it character for character."""
    # A backslash of the text's own would escape the Markdown around it (our `**`).
    unslashed = text.replace("\\", "\\\\")
    return escape_mentions(escape_markdown(unslashed))


def prompt_content(event: ConfirmEvent | AskUserEvent) -> str:
    """The text of a confirmation or question; its buttons answer it."""
    if isinstance(event, ConfirmEvent):
        args = ", ".join(f"{key}={value!r}" for key, value in event.args.items())
        return f"🔐 **{literal(event.requester)}**, allow {_code(event.tool)}({literal(args)})?"
    return f"❓ **{literal(event.requester)}**: {literal(event.question)}"


def outcome_content(outcome: str) -> str:
    """The line that closes an answered prompt (`approved by Ann`, `answered “…” by Ann`)."""
    return f"→ {literal(outcome)}"


def _code(name: str) -> str:
    # Inside a code span a backslash shows as itself, so only a name without backticks
    # goes in one.
    return f"`{name}`" if name and "`" not in name else literal(name)
