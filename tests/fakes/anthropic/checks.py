"""The request checks of the Messages API that a client can get wrong, each answered with
the 400 ``invalid_request_error`` the API gives: a wrong request fails here as it would there.

Checked: the required fields, roles and the opening user turn, empty text blocks, tool_use
ids answered by tool_result blocks in the next user turn (and only those), at most four
``cache_control`` breakpoints, the thinking budget (at least 1,024, below ``max_tokens``), and,
with thinking on, that an assistant turn whose tool calls are being answered starts with the
thinking block this server issued, unchanged (its signature is checked).
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..base import JSON
from .cache import content_blocks

MAX_BREAKPOINTS = 4
MIN_THINKING_BUDGET = 1024


class Invalid(Exception):
    """The request is not one the API accepts; the message is the API's kind of reason."""


def signature(thinking: str) -> str:
    """What this server signs a thinking block with: only it can make one that matches."""
    return "sig-" + hashlib.sha256(b"fake-anthropic:" + thinking.encode()).hexdigest()[:24]


def check_request(body: JSON) -> None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Invalid("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise Invalid("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Invalid("messages: at least one message is required")
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict) or not tool.get("name") or "input_schema" not in tool:
            raise Invalid("tools: each tool needs a name and an input_schema")
    _check_breakpoints(body)
    thinking = body.get("thinking")
    enabled = isinstance(thinking, dict) and thinking.get("type") == "enabled"
    if enabled:
        assert isinstance(thinking, dict)
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
            raise Invalid("thinking.enabled.budget_tokens: Input should be greater than 1023")
        if budget >= max_tokens:
            raise Invalid("`max_tokens` must be greater than `thinking.budget_tokens`")
    _check_messages(messages, thinking_on=enabled)


def _check_breakpoints(body: JSON) -> None:
    blocks: list[Any] = list(body.get("tools") or [])
    system = body.get("system")
    blocks += content_blocks(system) if system else []
    for message in body["messages"]:
        if isinstance(message, dict):
            blocks += content_blocks(message.get("content"))
    found = sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)
    if found > MAX_BREAKPOINTS:
        raise Invalid(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )


def _check_messages(messages: list[Any], *, thinking_on: bool) -> None:
    if not isinstance(messages[0], dict) or messages[0].get("role") != "user":
        raise Invalid("messages: the first message must use the user role")
    asked: set[str] = set()  # tool_use ids of the previous assistant turn
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise Invalid(f"messages.{index}.role: Input should be 'user' or 'assistant'")
        blocks = content_blocks(message.get("content"))
        if not blocks:
            raise Invalid(f"messages.{index}: content must not be empty")
        answered: set[str] = set()
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and not block.get("text"):
                raise Invalid(f"messages.{index}: text content blocks must be non-empty")
            if kind == "tool_result":
                if role != "user" or block.get("tool_use_id") not in asked:
                    raise Invalid(
                        f"messages.{index}: unexpected `tool_use_id` found in `tool_result` "
                        "blocks. Each `tool_result` block must have a corresponding `tool_use` "
                        "block in the previous message."
                    )
                answered.add(str(block["tool_use_id"]))
        if asked - answered:
            raise Invalid(
                f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(sorted(asked - answered))}"
            )
        asked = set()
        if role == "assistant":
            asked = {str(b.get("id")) for b in blocks if b.get("type") == "tool_use"}
            # The turn whose calls the request answers: the API checks its thinking.
            if thinking_on and asked and index + 2 == len(messages):
                _check_thinking(index, blocks)
    if asked:
        raise Invalid("messages: the last assistant turn's `tool_use` blocks have no results")


def _check_thinking(index: int, blocks: list[Any]) -> None:
    first = blocks[0]
    if first.get("type") not in ("thinking", "redacted_thinking"):
        raise Invalid(
            f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, "
            "but found `{}`. When `thinking` is enabled, a final `assistant` message must start "
            "with a thinking block.".format(first.get("type"))
        )
    for block in blocks:
        if block.get("type") == "thinking":
            text = block.get("thinking")
            if not isinstance(text, str) or block.get("signature") != signature(text):
                raise Invalid(f"messages.{index}: Invalid `signature` in `thinking` block")
