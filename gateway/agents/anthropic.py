"""The `claude` agent: the Anthropic Messages API, streamed, with the built-in tools.

It sees what the openai agent sees — base instructions, the persona, a formatting note, the
rolling summary, the recent window with each message's sender, then the new message — and
runs tools the same way (`tools.call_tool`: confirmed where asked, journaled by the router),
up to `max_tool_iterations` model calls per task.

Prompt caching: the API caches the prefix up to each `cache_control` breakpoint, in the order
tools, system, messages. Breakpoints go on the last tool definition, on the last system block
(instructions and persona, then the summary) and on the last block of the last message; the
next call — the next turn of the conversation or the next step of a tool loop — extends that
prefix, so it is read from the cache rather than paid in full again. Three of the four
breakpoints the API allows are used.

Extended thinking follows the reasoning level (`/reasoning`, `AGENVOY_REASONING`): none by
default, a growing token budget for low, medium and high. Thinking blocks, signed, go back to
the API unchanged within a tool loop, as the API requires; they are never shown as reply text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from gateway.agents.anthropic_stream import MessagesClient, Turn, usage_row
from gateway.agents.base import AgentContext, AgentFailed, Delta, Reply, Step, ToolResult
from gateway.agents.images import DecodeGate, Picture, Pictures, pictures_of
from gateway.agents.notes import new_message_notes, with_sources
from gateway.agents.openai import SUMMARY_INSTRUCTIONS, system_prompt
from gateway.agents.retries import ALONE, RetryPolicy
from gateway.agents.tools import (
    BUILTIN_TOOLS,
    Tool,
    ToolSource,
    call_tool,
    result_text,
    with_found,
)
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.settings import Settings
from gateway.store.sessions import StoredMessage

# Thinking tokens per reasoning level (the API's minimum budget is 1,024).
THINKING_BUDGETS = {"low": 2048, "medium": 8192, "high": 24576}
CACHE = {"type": "ephemeral"}


def thinking_budget(level: str) -> int:
    """Tokens of extended thinking for a reasoning level; 0 for none."""
    return THINKING_BUDGETS.get(level, 0)


def tool_definitions(tools: Mapping[str, Tool]) -> list[dict[str, Any]]:
    definitions = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in tools.values()
    ]
    if definitions:
        definitions[-1] = {**definitions[-1], "cache_control": CACHE}
    return definitions


def system_blocks(ctx: AgentContext) -> list[dict[str, Any]]:
    """Instructions and persona, then the summary, the cache breakpoint after the last."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": system_prompt(ctx)}]
    if ctx.summary:
        text = f"Summary of the earlier conversation:\n{ctx.summary}"
        blocks.append({"type": "text", "text": text})
    blocks[-1] = {**blocks[-1], "cache_control": CACHE}
    return blocks


def conversation(ctx: AgentContext, pictures: Pictures | None = None) -> list[dict[str, Any]]:
    """The window and the new message as alternating turns of text blocks.

    The window is the context's history whole: the recent messages and, before them, those
    the summary has not folded yet. It is not cut to the last `history_window` messages: its
    start then moves only when a batch is folded, so between folds each call's conversation
    starts with the previous call's, and is read from the cache.

    Messages in a row from one side (several people talking before the model answers) share
    one turn, a block each. Every turn is a list of blocks, as on the call that had it last:
    a turn must read the same on every call for the cached prefix to match.
    """
    turns: list[dict[str, Any]] = []

    def add(role: str, text: str) -> None:
        if not text:
            return  # the API refuses empty text blocks
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].append({"type": "text", "text": text})
        elif turns or role == "user":  # the conversation must open with a user turn
            turns.append({"role": role, "content": [{"type": "text", "text": text}]})

    for message in ctx.history:
        if message.role == "assistant":
            add("assistant", message.content)
        else:
            add("user", f"{message.sender or 'user'}: {message.content}")
    sender = ctx.origin.sender_name or ctx.origin.sender_id or "user"
    pictures = pictures or Pictures()
    # Recalled older messages, the asker's memories and the documents' passages open the new
    # message's turn: the turns before it stay as the previous call had them, so its cached
    # prefix still matches.
    for note in new_message_notes(ctx, sender):
        add("user", note)
    add("user", pictures.text_with_notes(f"{sender}: {ctx.text}"))
    # The new message's images follow its text in its turn. On the next turn that message is
    # text only (`images`), so the cached prefix ends before it; the images are paid once.
    turns[-1]["content"] += map(image_block, pictures.shown)
    return turns


def image_block(picture: Picture) -> dict[str, Any]:
    source = {"type": "base64", "media_type": picture.media_type, "data": picture.base64}
    return {"type": "image", "source": source}


def with_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with a cache breakpoint on the last block of the last message only (the
    kept list is not marked: breakpoints of earlier calls would add up past the limit)."""
    if not messages:
        return messages
    last = messages[-1]
    content = list(last["content"])
    content[-1] = {**content[-1], "cache_control": CACHE}
    return [*messages[:-1], {**last, "content": content}]


class AnthropicAgent:
    name = "claude"
    # Its context's `recalled` goes to the model (gateway/memory): the runner fills it.
    reads_recall = True

    def __init__(
        self,
        settings: Settings,
        clock: Clock = SYSTEM_CLOCK,
        tools: Mapping[str, Tool] = BUILTIN_TOOLS,
        found: ToolSource | None = None,
        retry: RetryPolicy = ALONE,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.tools = dict(tools)
        self.tool_names = frozenset(self.tools)
        # The MCP servers' tools, listed when a task starts (the servers start lazily).
        self.found = found
        self.tool_prefixes = found.prefixes if found is not None else ()
        self.decodes = DecodeGate(settings.image_decode_concurrency)
        key = settings.anthropic_api_key
        self.client = MessagesClient(
            settings.anthropic_base_url,
            key.get_secret_value() if key else "",
            settings.anthropic_timeout_seconds,
            clock,
            retry,
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    def request(
        self,
        model: str,
        system: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]],
        reasoning: str = "",
    ) -> dict[str, Any]:
        max_tokens = self.settings.anthropic_max_tokens
        body: dict[str, Any] = {"model": model, "system": system}
        budget = thinking_budget(reasoning)
        if budget:
            # The budget is part of max_tokens, which must stay above it: the answer's own
            # allowance is added on top so thinking never eats the reply.
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            max_tokens += budget
        body["max_tokens"] = max_tokens
        if tools:
            body["tools"] = tools
        body["messages"] = with_breakpoint(messages)
        return body

    async def summarize(self, previous: str, messages: Sequence[StoredMessage]) -> str:
        """Fold `messages` into `previous` with the summary model (no tools, no thinking)."""
        lines = "\n".join(f"{m.sender or m.role}: {m.content}" for m in messages)
        prompt = f"Summary so far:\n{previous or '(none)'}\n\nNew messages:\n{lines}"
        model = self.settings.summary_model or self.settings.anthropic_model
        body = self.request(
            model,
            [{"type": "text", "text": SUMMARY_INSTRUCTIONS}],
            [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
            tools=[],
        )
        turn = Turn()
        async for _ in self.client.stream(body, turn):
            pass
        if not turn.text.strip():
            raise AgentFailed("the summary model returned nothing")
        return turn.text.strip()

    async def run(self, ctx: AgentContext) -> AsyncIterator[Step]:
        model = ctx.model or self.settings.anthropic_model
        reasoning = ctx.reasoning or self.settings.reasoning
        system = system_blocks(ctx)
        found = await with_found(self.tools, self.found)
        tools = tool_definitions(found)
        shown = await pictures_of(
            ctx.attachments, ctx.workspace, self.settings, model, self.decodes
        )
        messages = conversation(ctx, shown)
        for _ in range(self.settings.max_tool_iterations):
            await ctx.before_model_call()
            body = self.request(model, system, messages, tools=tools, reasoning=reasoning)
            turn = Turn()
            started = self.clock.monotonic()
            async for piece in self.client.stream(body, turn):
                yield Delta(piece)
            elapsed = int((self.clock.monotonic() - started) * 1000)
            uses = turn.tool_uses()
            calls = [str(use.get("id") or "") for use in uses]
            # The model the API answered with: an alias resolves to a dated model id.
            yield usage_row(turn.model or model, turn.usage, elapsed, calls)
            if not uses:
                yield Reply(with_sources(turn.text, ctx.knowledge))
                return
            messages.append({"role": "assistant", "content": turn.content()})
            results: list[dict[str, Any]] = []
            for use in uses:
                result = await self._call_tool(ctx, use, turn, found)
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": result.call_id,
                    "content": result_text(result),
                }
                if result.status != "ok":
                    block["is_error"] = True
                results.append(block)
            # What was sent meanwhile (the `steer` queue mode) joins the same user turn, after
            # the results: the API wants user and assistant turns to alternate.
            for new in await ctx.steering():
                shown = await pictures_of(
                    new.attachments, ctx.workspace, self.settings, model, self.decodes
                )
                text = shown.text_with_notes(f"{new.sender or 'user'}: {new.text}")
                results += [{"type": "text", "text": text}, *map(image_block, shown.shown)]
            messages.append({"role": "user", "content": results})
        raise AgentFailed(
            f"stopped after {self.settings.max_tool_iterations} model calls without an answer"
        )

    async def _call_tool(
        self, ctx: AgentContext, use: dict[str, Any], turn: Turn, tools: Mapping[str, Tool]
    ) -> ToolResult:
        call_id, name = str(use.get("id") or ""), str(use.get("name") or "")
        if call_id in turn.invalid_inputs:
            raw = turn.invalid_inputs[call_id][:200]
            reason = f"invalid arguments: not a JSON object: {raw}"
            return ToolResult(call_id, name, "error", reason)
        return await call_tool(ctx, tools, call_id, name, dict(use.get("input") or {}))
