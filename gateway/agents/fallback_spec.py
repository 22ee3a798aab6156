"""`AGENVOY_FALLBACK`: the models the default agent falls back to, in order.

A comma-separated list of targets, each::

    <agent>[:<model>][@<base url>][;key=<ENV_NAME>]

- `agent`: `openai`, `claude` or `offline` (`claude-code` drives a local CLI and is no
  fallback for a provider's outage).
- `model`: default the agent's configured model (`AGENVOY_MODEL`, `AGENVOY_ANTHROPIC_MODEL`);
  it may hold `:` and `/` (`llama3.1:8b`, `meta-llama/llama-3.1-70b`).
- `@<base url>`: an `http(s)://` endpoint; default the agent's configured one.
- `;key=<ENV_NAME>`: the environment variable holding that endpoint's API key — never the
  key itself. Without it, a target on the configured endpoint uses the configured key, and a
  target with a base URL of its own is sent no key (so one provider's key never goes to
  another host).

Example: `openai:gpt-4o-mini@https://other.example/v1;key=OTHER_API_KEY,offline`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

FALLBACK_AGENTS: Final = ("openai", "claude", "offline")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BASE_URL: Final = re.compile(r"@(https?://\S+)$")


class BadFallbackSpec(ValueError):
    pass


@dataclass(frozen=True)
class FallbackTarget:
    agent: str
    model: str = ""  # "" for the agent's configured model
    base_url: str = ""  # "" for the agent's configured endpoint
    key_env: str = ""  # the variable holding the key; "" for the rule above


def parse_fallbacks(spec: str) -> list[FallbackTarget]:
    """The targets of `spec`, in order; `BadFallbackSpec` names the item and what is wrong."""
    if not spec.strip():
        return []
    return [_target(n, item.strip()) for n, item in enumerate(spec.split(","), start=1)]


def _target(number: int, item: str) -> FallbackTarget:
    if not item:
        raise BadFallbackSpec(f"AGENVOY_FALLBACK item {number} is empty")
    head, _, options = item.partition(";")
    # The options are never repeated in an error: a key pasted there would end in the logs.
    where = f"AGENVOY_FALLBACK item {number} ({head!r})"
    key_env = ""
    if options:
        name, eq, value = options.partition("=")
        if name.strip() != "key" or not eq:
            raise BadFallbackSpec(
                f"{where}: unknown option {name.strip()!r}; expected ;key=ENV_NAME"
            )
        key_env = value.strip()
        if not _ENV_NAME.fullmatch(key_env):
            raise BadFallbackSpec(
                f"{where}: ;key= takes the name of an environment variable holding the key "
                "(letters, digits, _), never the key itself"
            )
    base_url = ""
    found = _BASE_URL.search(head)
    if found:
        base_url, head = found.group(1), head[: found.start()]
        if not urlsplit(base_url).hostname:
            raise BadFallbackSpec(f"{where}: the base URL {base_url!r} names no host")
    elif "@" in head:
        raise BadFallbackSpec(f"{where}: after @ comes a base URL, http(s)://<host>[/path]")
    agent, _, model = head.partition(":")
    agent, model = agent.strip(), model.strip()
    if agent not in FALLBACK_AGENTS:
        raise BadFallbackSpec(
            f"{where}: unknown agent {agent!r}; a fallback is one of {', '.join(FALLBACK_AGENTS)}"
        )
    if agent == "offline" and (model or base_url or key_env):
        raise BadFallbackSpec(f"{where}: the offline agent takes no model, base URL or key")
    return FallbackTarget(agent, model, base_url, key_env)
