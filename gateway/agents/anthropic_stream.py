"""One streamed call of the Anthropic Messages API: the request, its retries, and the
server-sent events folded into the content blocks of one assistant message.

The blocks are kept as the API will want them back: thinking blocks with their signatures
and redacted thinking unchanged, tool_use blocks with their input parsed. A call is retried
(from the start, with tenacity) on 408/409/429/5xx/529, on an `overloaded_error` or `api_error`
event mid-stream, on a broken connection and on a stream that ends without `message_stop`;
`retry-after` is honoured. Any other refusal is an `AgentFailed` with the API's own message.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    wait_exponential_jitter,
)

from gateway.agents.base import AgentFailed, Usage
from gateway.agents.retries import (
    ALONE,
    FailureKind,
    Retryable,
    RetryPolicy,
    lost_kind,
    retry_after,
    status_kind,
    wait_for_server,
)
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.logs import get_logger

log = get_logger(__name__)

API_VERSION = "2023-06-01"
# Statuses worth another try: timeouts, conflicts, rate limits, server errors and 529
# ("overloaded"), as Anthropic documents them.
RETRY_STATUSES = frozenset({408, 409, 429})
RETRY_EVENT_ERRORS: dict[str, FailureKind] = {
    "overloaded_error": "overloaded",
    "api_error": "server_error",
    "rate_limit_error": "rate_limited",
}


@dataclass
class Turn:
    """One assistant message as it streams in."""

    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    partial_json: dict[int, str] = field(default_factory=dict)
    # Tool inputs that did not parse, by tool_use id: the call is refused with the reason.
    invalid_inputs: dict[str, str] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    stop_reason: str = ""
    finished: bool = False  # message_stop arrived: the message is whole

    def reset(self) -> None:
        self.blocks, self.partial_json, self.invalid_inputs, self.usage = {}, {}, {}, {}
        self.model, self.stop_reason, self.finished = "", "", False

    @property
    def text(self) -> str:
        return "".join(
            str(b.get("text") or "") for _, b in sorted(self.blocks.items()) if b["type"] == "text"
        )

    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for _, b in sorted(self.blocks.items()) if b["type"] == "tool_use"]

    def content(self) -> list[dict[str, Any]]:
        """The message's blocks as they go back to the API in the next call."""
        # The API refuses empty text blocks; everything else goes back exactly as it came.
        return [
            block
            for _, block in sorted(self.blocks.items())
            if not (block["type"] == "text" and not block.get("text"))
        ]

    def absorb(self, event: dict[str, Any]) -> str:
        """Fold one event into the message; returns new reply text, if any."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self.model = str(message.get("model") or "")
            self._add_usage(message.get("usage"))
        elif kind == "content_block_start":
            block = dict(event.get("content_block") or {})
            block.setdefault("type", "unknown")
            if block["type"] == "tool_use":
                block["input"] = {}
            self.blocks[int(event.get("index", 0))] = block
        elif kind == "content_block_delta":
            return self._delta(int(event.get("index", 0)), event.get("delta") or {})
        elif kind == "content_block_stop":
            self._close_block(int(event.get("index", 0)))
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.stop_reason = str(delta.get("stop_reason") or self.stop_reason)
            self._add_usage(event.get("usage"))
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error":
            error = event.get("error") or {}
            etype, message = str(error.get("type") or ""), str(error.get("message") or "")
            if etype in RETRY_EVENT_ERRORS:
                raise Retryable(f"{etype}: {message}", None, RETRY_EVENT_ERRORS[etype])
            raise AgentFailed(f"the Anthropic API stopped the answer ({etype}): {message}")
        return ""  # ping, and event types added to the API later

    def _delta(self, index: int, delta: dict[str, Any]) -> str:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            piece = str(delta.get("text") or "")
            block["text"] = str(block.get("text") or "") + piece
            return piece
        if kind == "input_json_delta":
            self.partial_json[index] = self.partial_json.get(index, "") + str(
                delta.get("partial_json") or ""
            )
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking") or "")
        elif kind == "signature_delta":
            block["signature"] = str(block.get("signature") or "") + str(
                delta.get("signature") or ""
            )
        return ""

    def _close_block(self, index: int) -> None:
        block = self.blocks.get(index)
        if block is None or block["type"] != "tool_use":
            return
        raw = self.partial_json.pop(index, "")
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            block["input"] = parsed
        else:
            # Sent back as an empty input (the API wants an object); the call is refused.
            block["input"] = {}
            self.invalid_inputs[str(block.get("id") or "")] = raw
            log.warning("model sent tool input that is not a JSON object", raw=raw[:200])

    def _add_usage(self, usage: object) -> None:
        # message_delta counts are cumulative: later values replace earlier ones.
        if isinstance(usage, dict):
            self.usage.update({k: v for k, v in usage.items() if v is not None})


def usage_row(model: str, usage: Mapping[str, Any], elapsed_ms: int, calls: list[str]) -> Usage:
    """The usage row of one call. `input` counts cache writes too (the reference rule for
    `claude`): they are input the model read in full this time; cache reads stay apart."""

    def count(key: str) -> int:
        value = usage.get(key)
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0

    written = count("cache_creation_input_tokens")
    return Usage(
        model=model,
        input=count("input_tokens") + written,
        output=count("output_tokens"),
        cache_read=count("cache_read_input_tokens"),
        cache_write=written,
        elapsed_ms=elapsed_ms,
        tool_calls=tuple(calls),
    )


class MessagesClient:
    """`POST {base}/v1/messages`, streamed, over one aiohttp session."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        idle_timeout: float,
        clock: Clock = SYSTEM_CLOCK,
        retry: RetryPolicy = ALONE,
    ) -> None:
        self.url = f"{base_url.rstrip('/')}/v1/messages"
        self.base_url = base_url
        self.api_key = api_key
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.retry = retry  # fewer tries in a fallback chain: the next model answers sooner
        self._http: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            # No total limit: a long answer streams for minutes, with pings in between; a
            # silence longer than the idle timeout is what means the call is lost.
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=30, sock_read=self.idle_timeout
            )
            self._http = aiohttp.ClientSession(timeout=timeout)
        return self._http

    async def stream(self, body: dict[str, Any], into: Turn) -> AsyncIterator[str]:
        """Stream one call into `into`, yielding reply text; retried from the start, with
        only text not shown by an earlier attempt yielded again."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(Retryable),
            stop=self.retry.stop,
            wait=wait_for_server(_backoff, self.retry.longest_wait),
            sleep=self.clock.sleep,
            reraise=True,
        )
        shown = ""
        try:
            async for attempt in retrying:
                with attempt:
                    produced = ""
                    async for piece in self._attempt({**body, "stream": True}, into):
                        produced += piece
                        if len(produced) > len(shown):
                            yield produced[len(shown) :]
                            shown = produced
        except Retryable as exc:
            raise exc.failed() from exc

    async def _attempt(self, body: dict[str, Any], into: Turn) -> AsyncIterator[str]:
        into.reset()
        headers = {
            "x-api-key": self.api_key,
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        try:
            async with self._session().post(self.url, json=body, headers=headers) as resp:
                if resp.status >= 400:
                    await _refused(resp)
                async for event in _events(resp.content):
                    piece = into.absorb(event)
                    if piece:
                        yield piece
                    if into.finished:
                        break
        except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            lost = f"cannot reach {self.base_url}: {type(exc).__name__}"
            raise Retryable(lost, None, lost_kind(exc)) from exc
        if not into.finished:
            raise Retryable("the answer was cut off mid-stream")


async def _refused(resp: aiohttp.ClientResponse) -> None:
    """Raise what an error status means: another try, or the API's reason."""
    raw = await resp.text()
    try:
        error = json.loads(raw).get("error") or {}
        etype, message = str(error.get("type") or ""), str(error.get("message") or "")
    except (ValueError, AttributeError):
        etype, message = "", raw[:300]
    if resp.status in RETRY_STATUSES or resp.status >= 500:
        kind = status_kind(resp.status)
        raise Retryable(f"HTTP {resp.status} {etype}".strip(), retry_after(resp.headers), kind)
    if resp.status == 402 or etype == "billing_error":  # the account's credit is spent
        raise Retryable(f"HTTP {resp.status} {etype}: {message}", None, "quota")
    if resp.status == 401:
        raise AgentFailed(
            f"the Anthropic API rejected the API key (AGENVOY_ANTHROPIC_API_KEY): {message}"
        )
    raise AgentFailed(
        f"the Anthropic API refused the request (HTTP {resp.status} {etype}): {message}"
    )


async def _events(content: aiohttp.StreamReader) -> AsyncIterator[dict[str, Any]]:
    """Server-sent events as JSON objects: `data:` lines gathered until a blank line."""
    data: list[str] = []
    async for raw in content:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line or not data:
            continue  # `event:` names repeat the data's own `type`; comments are skipped
        payload, data = "\n".join(data), []
        try:
            event = json.loads(payload)
        except ValueError:
            log.warning("the Anthropic API sent a malformed event", data=payload[:200])
            continue
        if isinstance(event, dict):
            yield event


# Between tries when the API named no wait of its own.
_backoff = wait_exponential_jitter(initial=1, max=20)
