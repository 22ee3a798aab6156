"""Prompt caching as the Messages API documents it, deterministic: tokens are words.

A request's prompt is a row of blocks in the API's order — tools, then system, then the
messages' content blocks. A ``cache_control`` breakpoint on a block writes the prefix ending
there to the cache; a later request whose blocks start with a cached prefix reads it,
checking the boundaries up to ``LOOKBACK`` blocks before each of its breakpoints (the API's
automatic look-back). Changing the thinking settings invalidates cached message prefixes,
not tools or system, as the API does. Nothing expires.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..base import JSON

LOOKBACK = 20


@dataclass(frozen=True)
class Block:
    key: str  # identity of the block in its place: what a prefix is hashed from
    tokens: int
    breakpoint: bool


@dataclass(frozen=True)
class CacheUse:
    read: int  # tokens of the longest cached prefix found
    written: int  # tokens written to the cache beyond it, up to the last breakpoint
    uncached: int  # the rest of the prompt

    def usage(self) -> JSON:
        return {
            "input_tokens": self.uncached,
            "cache_creation_input_tokens": self.written,
            "cache_read_input_tokens": self.read,
        }


def words(value: Any) -> int:
    """Tokens of a value: the words of every string in it."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, dict):
        return sum(words(v) for k, v in value.items() if k not in ("type", "cache_control"))
    if isinstance(value, list):
        return sum(words(v) for v in value)
    return 0


def _key(part: str, block: Any) -> str:
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return part + json.dumps(block, sort_keys=True)


def content_blocks(content: Any) -> list[Any]:
    """A message's content as blocks: a string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def prompt_blocks(body: JSON) -> list[Block]:
    blocks: list[Block] = []

    def add(part: str, block: Any) -> None:
        marked = isinstance(block, dict) and isinstance(block.get("cache_control"), dict)
        blocks.append(Block(_key(part, block), words(block), marked))

    for tool in body.get("tools") or []:
        add("tool", tool)
    system = body.get("system")
    for block in content_blocks(system) if system else []:
        add("system", block)
    thinking = json.dumps(body.get("thinking"), sort_keys=True)
    for message in body.get("messages") or []:
        for block in content_blocks(message.get("content")):
            add(f"{message.get('role')}|{thinking}|", block)
    return blocks


class PromptCache:
    def __init__(self, min_tokens: int = 0) -> None:
        self.min_tokens = min_tokens  # shorter prefixes are not cached (the API: 1,024+)
        self._stored: dict[str, int] = {}

    def use(self, body: JSON) -> CacheUse:
        blocks = prompt_blocks(body)
        total = sum(b.tokens for b in blocks)
        digests: list[str] = []
        running = hashlib.sha256()
        for block in blocks:
            running.update(block.key.encode())
            digests.append(running.copy().hexdigest())
        breakpoints = [i for i, b in enumerate(blocks) if b.breakpoint]
        checked = {j for b in breakpoints for j in range(max(0, b - LOOKBACK + 1), b + 1)}
        hits = [j for j in checked if digests[j] in self._stored]
        read = self._stored[digests[max(hits)]] if hits else 0
        written = 0
        for b in breakpoints:
            tokens = sum(block.tokens for block in blocks[: b + 1])
            if digests[b] not in self._stored and tokens >= self.min_tokens:
                self._stored[digests[b]] = tokens
                written = max(written, tokens - read)
        return CacheUse(read, written, total - read - written)
