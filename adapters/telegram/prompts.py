"""Prompts as Telegram messages: inline keyboards whose buttons carry the task, and the
ForceReply a free-text question is answered through.

Callback data stays under Telegram's 64 bytes: the kind, the task hash and the choice (an
option's index, never its label).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass

from telegram import ForceReply, InlineKeyboardButton, InlineKeyboardMarkup

from gateway.events import AskUserEvent, ConfirmEvent

CONFIRM, OPTION = "c", "a"
MAX_OPTIONS = 25


@dataclass(frozen=True, slots=True)
class Press:
    """A pressed prompt button: the task, and approve/deny or the option's index."""

    task_hash: str
    approve: bool | None = None
    option: int | None = None


def callback_data(kind: str, task_hash: str, choice: str) -> str:
    data = f"{kind}:{task_hash}:{choice}"
    assert len(data.encode()) <= 64
    return data


def parse_press(data: str) -> Press | None:
    """The button behind callback data; None for data no prompt of ours carries."""
    kind, _, rest = data.partition(":")
    task_hash, _, choice = rest.partition(":")
    if kind == CONFIRM and choice in ("y", "n"):
        return Press(task_hash, approve=choice == "y")
    if kind == OPTION and choice.isdigit():
        return Press(task_hash, option=int(choice))
    return None


def answered_by_reply(event: ConfirmEvent | AskUserEvent) -> bool:
    """A free-text question: a reply to the prompt message is the answer."""
    return isinstance(event, AskUserEvent) and not event.options


def prompt_message(
    event: ConfirmEvent | AskUserEvent,
) -> tuple[str, InlineKeyboardMarkup | ForceReply]:
    """The HTML text of a prompt, and the buttons (or reply field) that answer it. Every part
    a person or a model chose (the requester's name, the tool, its arguments, the question) is
    escaped: a name such as `<a href=…>Admin</a>` shows as typed, never as markup."""
    if isinstance(event, ConfirmEvent):
        args = json.dumps(event.args, ensure_ascii=False)
        text = f"🔐 {_esc(event.requester)}, allow <b>{_esc(event.tool)}</b> {_esc(args)}?"
        buttons = [
            InlineKeyboardButton(
                "Approve", callback_data=callback_data(CONFIRM, event.task_hash, "y")
            ),
            InlineKeyboardButton(
                "Deny", callback_data=callback_data(CONFIRM, event.task_hash, "n")
            ),
        ]
        return text, InlineKeyboardMarkup([buttons])
    question = f"❓ {_esc(event.requester)}: {_esc(event.question)}"
    if not answered_by_reply(event):
        rows = [
            [
                InlineKeyboardButton(
                    label[:64], callback_data=callback_data(OPTION, event.task_hash, str(index))
                )
            ]
            for index, label in enumerate(event.options[:MAX_OPTIONS])
        ]
        return question, InlineKeyboardMarkup(rows)
    text = f"{question}\n<i>Reply to this message to answer.</i>"
    return text, ForceReply(selective=True, input_field_placeholder="your answer")


def _esc(text: str) -> str:
    return html.escape(text, quote=False)
