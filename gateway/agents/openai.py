"""The `openai` agent: any OpenAI-compatible chat-completions endpoint, streamed, with tools.

Context of each call: system prompt (base instructions, the session persona, a formatting note
for the platform), the rolling summary if any, the recent window of the conversation with each
message's sender, then the new message. Tool calls (several per reply too) run through the
router (journaled, confirmation-gated where the tool says so); their results go back to the
model until it answers in text or `max_tool_iterations` calls were made.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    wait_exponential_jitter,
)

from gateway.agents.base import (
    AgentContext,
    AgentFailed,
    Delta,
    Reply,
    Step,
    ToolResult,
    Usage,
)
from gateway.agents.images import DecodeGate, Pictures, pictures_of
from gateway.agents.notes import new_message_notes, with_sources
from gateway.agents.retries import (
    ALONE,
    Retryable,
    RetryPolicy,
    failure_kind,
    lost_kind,
    retry_after,
    wait_for_server,
)
from gateway.agents.tools import (
    BUILTIN_TOOLS,
    Tool,
    ToolSource,
    call_tool,
    result_text,
    with_found,
)
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.logs import get_logger
from gateway.settings import Settings
from gateway.store.sessions import StoredMessage

log = get_logger(__name__)

BASE_INSTRUCTIONS = (
    "You are the assistant of a shared conversation. Messages from people start with their "
    "name. Use the tools when they help; ask before doing anything the user did not ask for."
)
SUMMARY_INSTRUCTIONS = (
    "Fold the new messages into the summary of this conversation. Keep names, decisions, "
    "facts and open questions; drop small talk. Answer with the updated summary only."
)
FORMATTING = {
    "discord": "Format replies with Discord Markdown.",
    "telegram": "Format replies with simple Markdown: bold, italics, inline code, code blocks.",
    "http": "Reply in plain text or simple Markdown.",
    "terminal": "Reply in plain text or simple Markdown.",
}


def system_prompt(ctx: AgentContext) -> str:
    """Base instructions, the session persona, and a formatting note for the platform."""
    system = [BASE_INSTRUCTIONS]
    if ctx.persona:
        system.append(f"Persona: {ctx.persona}")
    system.append(FORMATTING.get(ctx.origin.platform, ""))
    return "\n\n".join(system)


@dataclass
class _Completion:
    text: str = ""
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    finished: bool = False  # a finish reason or [DONE] arrived: the answer is whole


class OpenAIAgent:
    name = "openai"
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
        self.retry = retry  # fewer tries in a fallback chain: the next model answers sooner
        self.tools = dict(tools)
        self.tool_names = frozenset(self.tools)
        # The MCP servers' tools, listed when a task starts (the servers start lazily).
        self.found = found
        self.tool_prefixes = found.prefixes if found is not None else ()
        self.base_url = settings.openai_base_url.rstrip("/")
        key = settings.openai_api_key
        self.api_key = key.get_secret_value() if key else ""
        self._http: aiohttp.ClientSession | None = None
        self.decodes = DecodeGate(settings.image_decode_concurrency)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            timeout = aiohttp.ClientTimeout(total=self.settings.openai_timeout_seconds)
            self._http = aiohttp.ClientSession(timeout=timeout)
        return self._http

    async def summarize(self, previous: str, messages: Sequence[StoredMessage]) -> str:
        """Fold `messages` into `previous` with the summary model (no tools, no streaming)."""
        lines = "\n".join(f"{m.sender or m.role}: {m.content}" for m in messages)
        prompt = [
            {"role": "system", "content": SUMMARY_INSTRUCTIONS},
            {
                "role": "user",
                "content": f"Summary so far:\n{previous or '(none)'}\n\nNew messages:\n{lines}",
            },
        ]
        completion = _Completion()
        model = self.settings.summary_model or self.settings.model
        async for _ in self._complete(model, prompt, [], completion):
            pass
        if not completion.text.strip():
            raise AgentFailed("the summary model returned nothing")
        return completion.text.strip()

    def context_messages(self, ctx: AgentContext) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt(ctx)}]
        if ctx.summary:
            messages.append(
                {
                    "role": "system",
                    "content": f"Summary of the earlier conversation:\n{ctx.summary}",
                }
            )
        # The context bounds the history already: the window, and before it what the summary
        # has not folded yet. Cutting it here would hide those until their fold.
        for message in ctx.history:
            if message.role == "assistant":
                messages.append({"role": "assistant", "content": message.content})
            else:
                who = message.sender or "user"
                messages.append({"role": "user", "content": f"{who}: {message.content}"})
        sender = ctx.origin.sender_name or ctx.origin.sender_id or "user"
        # Just before the new message, which they were found for.
        messages += [{"role": "system", "content": n} for n in new_message_notes(ctx, sender)]
        messages.append({"role": "user", "content": f"{sender}: {ctx.text}"})
        return messages

    async def run(self, ctx: AgentContext) -> AsyncIterator[Step]:
        model = ctx.model or self.settings.model
        reasoning = ctx.reasoning or self.settings.reasoning
        messages = self.context_messages(ctx)
        shown = await pictures_of(
            ctx.attachments, ctx.workspace, self.settings, model, self.decodes
        )
        messages[-1] = with_pictures(messages[-1], shown)
        tools = await with_found(self.tools, self.found)
        schemas = [tool.schema() for tool in tools.values()]
        for _ in range(self.settings.max_tool_iterations):
            await ctx.before_model_call()
            completion = _Completion()
            started = self.clock.monotonic()
            stream = self._complete(model, messages, schemas, completion, reasoning=reasoning)
            async for delta in stream:
                yield Delta(delta)
            elapsed = int((self.clock.monotonic() - started) * 1000)
            calls = [completion.calls[i] for i in sorted(completion.calls)]
            yield _usage(model, completion.usage, elapsed, [c["id"] for c in calls])
            if not calls:
                yield Reply(with_sources(completion.text, ctx.knowledge))
                return
            messages.append(
                {
                    "role": "assistant",
                    "content": completion.text or None,
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]},
                        }
                        for c in calls
                    ],
                }
            )
            for call in calls:
                result = await self._call_tool(ctx, call, tools)
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "content": result_text(result),
                    }
                )
            # What was sent meanwhile (the `steer` queue mode) comes in as new user turns.
            for new in await ctx.steering():
                turn = {"role": "user", "content": f"{new.sender or 'user'}: {new.text}"}
                shown = await pictures_of(
                    new.attachments, ctx.workspace, self.settings, model, self.decodes
                )
                messages.append(with_pictures(turn, shown))
        raise AgentFailed(
            f"stopped after {self.settings.max_tool_iterations} model calls without an answer"
        )

    async def _call_tool(
        self, ctx: AgentContext, call: dict[str, Any], tools: Mapping[str, Tool]
    ) -> ToolResult:
        name, call_id = call["name"], call["id"]
        try:
            args = json.loads(call["arguments"] or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            return ToolResult(call_id, name, "error", f"invalid arguments: {exc}")
        return await call_tool(ctx, tools, call_id, name, args)

    async def _complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        into: _Completion,
        *,
        reasoning: str = "",
    ) -> AsyncIterator[str]:
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if reasoning:  # only reasoning models accept the field, so it is sent when asked for
            body["reasoning_effort"] = reasoning
        if tools:  # providers reject an empty list
            body["tools"] = tools
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = f"{self.base_url}/chat/completions"
        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda e: isinstance(e, Retryable)),
            stop=self.retry.stop,
            wait=wait_for_server(_backoff, self.retry.longest_wait),
            sleep=self.clock.sleep,
            reraise=True,
        )
        shown = ""  # reply text already streamed to the user, over every attempt
        try:
            async for attempt in retrying:
                with attempt:
                    produced = ""
                    async for delta in self._stream(url, body, headers, into):
                        produced += delta
                        # A retry starts the answer over; the user sees only what is new.
                        if len(produced) > len(shown):
                            yield produced[len(shown) :]
                            shown = produced
        except Retryable as exc:
            raise exc.failed() from exc

    async def _stream(
        self, url: str, body: dict[str, Any], headers: dict[str, str], into: _Completion
    ) -> AsyncIterator[str]:
        # A retried call starts over: nothing of a failed attempt is kept.
        into.text, into.calls, into.usage, into.finished = "", {}, {}, False
        try:
            async with self._session().post(url, json=body, headers=headers) as resp:
                if resp.status in (401, 403):
                    raise AgentFailed(
                        "the model provider rejected the API key (AGENVOY_OPENAI_API_KEY)"
                    )
                if resp.status == 429 or resp.status >= 500:
                    kind = failure_kind(resp.status, await resp.text())
                    raise Retryable(f"HTTP {resp.status}", retry_after(resp.headers), kind)
                if resp.status >= 400:
                    detail = (await resp.text())[:300]
                    raise AgentFailed(f"the model refused the request: HTTP {resp.status} {detail}")
                async for line in resp.content:
                    text = line.decode("utf-8", errors="replace").strip()
                    if not text.startswith("data:"):
                        continue
                    data = text[5:].strip()
                    if data == "[DONE]":
                        into.finished = True
                        break
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        log.warning("model sent a malformed stream chunk", chunk=data[:200])
                        continue
                    delta = _absorb(chunk, into)
                    if delta:
                        yield delta
        except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            lost = f"cannot reach {self.base_url}: {type(exc).__name__}"
            raise Retryable(lost, None, lost_kind(exc)) from exc
        if not into.finished:
            # Ended without a finish reason: cut off, not complete, whatever the text says.
            raise Retryable("the answer was cut off mid-stream", None)


def with_pictures(message: dict[str, Any], pictures: Pictures) -> dict[str, Any]:
    """The new message with its images as `image_url` parts (data URLs, which every
    OpenAI-compatible vision endpoint takes), and a line for each image that is not shown."""
    text = pictures.text_with_notes(str(message["content"]))
    if not pictures.shown:
        return {**message, "content": text}
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": p.data_url}} for p in pictures.shown]
    return {**message, "content": parts}


def _absorb(chunk: dict[str, Any], into: _Completion) -> str:
    """Fold one streamed chunk into the completion; returns new reply text, if any."""
    if isinstance(chunk.get("usage"), dict):
        into.usage = chunk["usage"]
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    if choices[0].get("finish_reason"):
        into.finished = True
    delta = choices[0].get("delta") or {}
    for fragment in delta.get("tool_calls") or []:
        slot = into.calls.setdefault(
            int(fragment.get("index", 0)), {"id": "", "name": "", "arguments": ""}
        )
        slot["id"] = fragment.get("id") or slot["id"]
        function = fragment.get("function") or {}
        slot["name"] = function.get("name") or slot["name"]
        slot["arguments"] += function.get("arguments") or ""
    content = delta.get("content") or ""
    into.text += content
    return str(content)


def _usage(model: str, usage: dict[str, Any], elapsed_ms: int, call_ids: list[str]) -> Usage:
    """One usage row from whichever usage fields the provider sent.

    OpenAI-style blocks count cached tokens inside `prompt_tokens`. Anthropic-style blocks
    (Claude models behind a compatible endpoint) leave cache writes out of `input_tokens`;
    they are added back so `input` means the same for every provider.
    """
    details = usage.get("prompt_tokens_details") or {}
    if not isinstance(details, dict):
        details = {}

    def count(*values: object) -> int:
        for value in values:
            if isinstance(value, int | float) and not isinstance(value, bool):
                return int(value)
        return 0

    cache_write = count(details.get("cache_write_tokens"), usage.get("cache_creation_input_tokens"))
    if "prompt_tokens" in usage:
        prompt = count(usage.get("prompt_tokens"))
    else:
        prompt = count(usage.get("input_tokens")) + cache_write
    return Usage(
        model=model,
        input=prompt,
        output=count(usage.get("completion_tokens"), usage.get("output_tokens")),
        cache_read=count(
            details.get("cached_tokens"),
            usage.get("cache_read_input_tokens"),
            usage.get("prompt_cache_hit_tokens"),
        ),
        cache_write=cache_write,
        elapsed_ms=elapsed_ms,
        tool_calls=tuple(call_ids),
    )


# Between tries when the server named no wait of its own.
_backoff = wait_exponential_jitter(multiplier=0.5, max=20)
