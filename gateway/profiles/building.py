"""A profile's version as the settings its agent is built with: the environment's settings
with the profile's agent kind, model, endpoint, key (read from where its reference points),
reasoning level and window, and the MCP servers it names."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from pydantic import SecretStr

from gateway.mcp_tools.config import McpConfig
from gateway.profiles.agents import Build, Built
from gateway.profiles.keys import resolve_key
from gateway.profiles.spec import ProfileSpec
from gateway.settings import Settings


def profile_settings(settings: Settings, spec: ProfileSpec, key: str | None) -> Settings:
    """`settings` as `spec` changes them (its empty fields keep the environment's values)."""
    agent = spec.agent or settings.agent
    update: dict[str, Any] = {"agent": agent}
    if "fallback" in Settings.model_fields:
        # The environment's fallback chain is the `default` profile's; a profile's own
        # fallbacks are its `fallbacks` (the pool's chain seam).
        update["fallback"] = ""
    if spec.reasoning:
        update["reasoning"] = spec.reasoning
    if spec.history_window:
        update["history_window"] = spec.history_window
    model, url, key_field = (
        ("anthropic_model", "anthropic_base_url", "anthropic_api_key")
        if agent == "claude"
        else ("model", "openai_base_url", "openai_api_key")
    )
    if spec.model:
        update[model] = spec.model
    if spec.base_url:
        update[url] = spec.base_url
        # The environment's key is for the environment's endpoint: another host gets only the
        # key the profile names (as an AGENVOY_FALLBACK target does).
        update[key_field] = None
    if key is not None:
        update[key_field] = SecretStr(key)
    return settings.model_copy(update=update)


def servers_of(config: McpConfig, spec: ProfileSpec) -> McpConfig:
    """The MCP servers a profile names (all of them when it names none)."""
    if not spec.mcp_servers:
        return config
    wanted = set(spec.mcp_servers)
    return dataclasses.replace(config, servers=tuple(s for s in config.servers if s.name in wanted))


# Makes the agent (and the MCP tools it alone holds) from settings and servers, retrying
# briefly when it heads a fallback chain (`chained`): the composition root's `one_agent`.
Make = Callable[[Settings, McpConfig, bool], Built]


def builder(settings: Settings, config: McpConfig, make: Make) -> Build:
    """The pool's `Build`: the key read off the event loop (a secrets file), then `make`."""

    async def build(_name: str, spec: ProfileSpec) -> Built:
        secrets = settings.secrets_path
        key = await asyncio.to_thread(resolve_key, spec.key, secrets)
        chained = bool(spec.fallbacks)
        return make(profile_settings(settings, spec, key), servers_of(config, spec), chained)

    return build
