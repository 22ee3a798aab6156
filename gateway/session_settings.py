"""A session's own settings — name, persona, model, reasoning level, tools that run unasked,
what a message arriving during a run does —
checked and changed in one place, for the slash commands and `PUT /v1/session/{sid}` alike.

Renaming is for anyone who may use the session; what changes the agent's behaviour for
everyone in a shared chat is for admins (`auth`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gateway.auth import Authority
from gateway.events import Origin
from gateway.store.models import SessionRow
from gateway.store.sessions import SessionStore
from gateway.text import UnstorableText, check_storable

REASONING_LEVELS: Final = ("low", "medium", "high")
# What a message that arrives while the session runs a task does (`/queue`):
QUEUE_MODES: Final = {
    "followup": "runs as its own task after the running one",
    "collect": "waits; all that arrived during a run are answered together, in one task",
    "steer": "goes to the running task at its next step (agents that can take it)",
    "interrupt": "cancels the running task and what waits, and is answered at once",
}
TOOL_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")
MAX_NAME_CHARS: Final = 200
MAX_ALLOWED_TOOLS: Final = 64


class SettingsRefused(ValueError):
    """A change that cannot be made as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class SettingsChange:
    """Fields left as None stay as they are."""

    name: str | None = None
    persona: str | None = None
    model: str | None = None
    reasoning: str | None = None  # "" for the provider's default
    allowed_tools: Sequence[str] | None = None

    def behavioural(self) -> list[str]:
        """The fields that change how the agent behaves (all but the name)."""
        fields = {
            "persona": self.persona,
            "model": self.model,
            "reasoning": self.reasoning,
            "allowed_tools": self.allowed_tools,
        }
        return [name for name, value in fields.items() if value is not None]


class SessionSettings:
    def __init__(
        self,
        store: SessionStore,
        authority: Authority,
        *,
        max_persona_chars: int,
        known_tools: frozenset[str] | None = None,
        tool_prefixes: tuple[str, ...] = (),
    ) -> None:
        """`known_tools`: the agent's tool names, when it declares them; otherwise any
        well-formed name may be allowed (the agent's backend knows its own tools).
        `tool_prefixes`: names of tools found only when a server runs (`<server>__…`)."""
        self.store = store
        self.authority = authority
        self.max_persona_chars = max_persona_chars
        self.known_tools = known_tools
        self.tool_prefixes = tool_prefixes

    async def get(self, session_id: str) -> SessionRow | None:
        return await self.store.get(session_id)

    async def change(self, session_id: str, who: Origin, change: SettingsChange) -> SessionRow:
        """Apply `change` to an existing session (UnknownSession if there is none)."""
        behavioural = change.behavioural()
        if behavioural:
            self.authority.require_configure(who, session_id, "the agent settings")
        fields: dict[str, str] = {}
        for name, value, limit in (
            ("name", change.name, MAX_NAME_CHARS),
            ("model", change.model, MAX_NAME_CHARS),
            ("persona", change.persona, self.max_persona_chars),
        ):
            if value is not None:
                if len(value) > limit:
                    raise SettingsRefused(f"{name} is longer than {limit} characters")
                try:
                    check_storable(value, name)
                except UnstorableText as exc:
                    raise SettingsRefused(str(exc)) from None
                # PostgreSQL text cannot hold NUL; the archive keeps the same replacement.
                fields[name] = value.strip().replace("\x00", "\ufffd")
        if change.reasoning is not None:
            fields["reasoning"] = self.reasoning_level(change.reasoning)
        tools = None
        if change.allowed_tools is not None:
            tools = sorted(set(change.allowed_tools))
            if len(change.allowed_tools) > MAX_ALLOWED_TOOLS:
                raise SettingsRefused(f"at most {MAX_ALLOWED_TOOLS} tools may be allowed")
            for tool in tools:
                self.check_tool(tool)
        return await self.store.update(session_id, allowed_tools=tools, **fields)

    async def allow(self, session_id: str, who: Origin, tool: str, allowed: bool) -> frozenset[str]:
        """Let `tool` run without confirmation here (or ask again); returns the new list."""
        self.authority.require_configure(who, session_id, "which tools run unasked")
        if allowed:
            self.check_tool(tool)
        elif not TOOL_NAME.fullmatch(tool):
            raise SettingsRefused(f"{tool!r} is not a tool name")
        await self.store.ensure(session_id)
        return await self.store.set_tool_allowed(session_id, tool, allowed)

    async def set_queue_mode(self, session_id: str, who: Origin, mode: str) -> str:
        """Change what messages arriving during a run do here; returns the mode set."""
        self.authority.require_configure(who, session_id, "the queue mode")
        chosen = mode.strip().lower()
        if chosen not in QUEUE_MODES:
            raise SettingsRefused(
                f"unknown queue mode {mode!r}; use one of: {', '.join(QUEUE_MODES)}"
            )
        await self.store.ensure(session_id)
        await self.store.set_queue_mode(session_id, chosen)
        return chosen

    def check_tool(self, tool: str) -> None:
        if not TOOL_NAME.fullmatch(tool):
            raise SettingsRefused(f"{tool!r} is not a tool name")
        if any(tool.startswith(p) and len(tool) > len(p) for p in self.tool_prefixes):
            return
        if self.known_tools is not None and tool not in self.known_tools:
            names = ", ".join([*sorted(self.known_tools), *(f"{p}…" for p in self.tool_prefixes)])
            raise SettingsRefused(f"the agent has no tool {tool!r}; its tools: {names}")

    @staticmethod
    def reasoning_level(level: str) -> str:
        """The stored form of a reasoning level: "" for the default."""
        chosen = level.strip().lower()
        if chosen in ("", "default"):
            return ""
        if chosen not in REASONING_LEVELS:
            choices = ", ".join((*REASONING_LEVELS, "default"))
            raise SettingsRefused(f"unknown reasoning level {level!r}; use one of: {choices}")
        return chosen
