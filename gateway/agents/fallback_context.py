"""What each model of a fallback chain sees of the task: the task's own context, with the
tool calls of the models before it remembered, so a model taking over never runs again what
an earlier one ran, and never asks the user again about it.

The router journals a call under its call id, but each model names its calls its own way:
the chain recognises a call again by its tool and arguments instead.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from gateway.agents.base import AgentContext, NewMessage, PastMessage, ToolCall, ToolResult
from gateway.agents.tool_memory import ToolMemory
from gateway.events import Attachment, Origin
from gateway.knowledge.cited import Cited
from gateway.memory.recalled import Recalled
from gateway.memory.remembered import MemberMemory

# How much of an earlier result the next model is told (it may call a reading tool again).
NOTE_RESULT_CHARS = 500


def call_key(tool: str, args: dict[str, Any]) -> str:
    return f"{tool} {json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)}"


class ToolsRan:
    """The tool calls a task has run so far with success, whichever model asked for them."""

    def __init__(self) -> None:
        self.results: dict[str, ToolResult] = {}
        self.args: dict[str, dict[str, Any]] = {}

    def note(self) -> str:
        """What the next model is told of them, after the user's message."""
        if not self.results:
            return ""
        lines = [
            f"- {result.tool}({json.dumps(self.args[key], ensure_ascii=False, default=str)})"
            f" -> {result.status}: {result.result[:NOTE_RESULT_CHARS]}"
            for key, result in self.results.items()
        ]
        return (
            "\n\n(Another model began this answer and ran these tools already; their effects "
            "stand and they are not run again:\n" + "\n".join(lines) + ")"
        )


class MemberContext:
    """`inner` as one model of the chain sees it. A model after the first gets no session
    model override (that names the first model) and is told of the tools already run."""

    def __init__(self, inner: AgentContext, ran: ToolsRan, *, takes_over: bool) -> None:
        self._inner = inner
        self._ran = ran
        self.session_id: str = inner.session_id
        self.task_hash: str = inner.task_hash
        self.origin: Origin = inner.origin
        self.text: str = inner.text + (ran.note() if takes_over else "")
        self.attachments: Sequence[Attachment] = inner.attachments
        self.history: Sequence[PastMessage] = inner.history
        self.workspace: Path = inner.workspace
        self.persona: str = inner.persona
        self.model: str = "" if takes_over else inner.model
        self.summary: str = inner.summary
        self.reasoning: str = inner.reasoning
        self.allowed_tools: frozenset[str] = inner.allowed_tools
        self.tool_memory: ToolMemory | None = inner.tool_memory
        self.recalled: Sequence[Recalled] = inner.recalled
        self.member_memories: Sequence[MemberMemory] = inner.member_memories
        self.knowledge: Sequence[Cited] = inner.knowledge

    async def confirm(self, tool: str, args: dict[str, Any]) -> bool:
        if call_key(tool, args) in self._ran.results:
            return True  # approved and run already: the call is answered from what it gave
        return await self._inner.confirm(tool, args)

    async def ask_user(self, question: str, options: Sequence[str] = ()) -> str | None:
        return await self._inner.ask_user(question, options)

    async def run_tool(self, call: ToolCall, execute: Callable[[], Awaitable[str]]) -> ToolResult:
        key = call_key(call.tool, call.args)
        earlier = self._ran.results.get(key)
        if earlier is not None:
            return ToolResult(call.call_id, call.tool, earlier.status, earlier.result)
        result = await self._inner.run_tool(call, execute)
        # What ran with effect is kept; a failed call had none, and may be tried again.
        if result.status == "ok":
            self._ran.results[key] = result
            self._ran.args[key] = call.args
        return result

    async def before_model_call(self) -> None:
        await self._inner.before_model_call()

    async def record_file_version(self, directory: str, name: str, content: str) -> None:
        await self._inner.record_file_version(directory, name, content)

    async def steering(self) -> list[NewMessage]:
        return await self._inner.steering()

    async def delegate(self, text: str, key: str = "") -> str:
        return await self._inner.delegate(text, key)

    async def search_history(self, query: str) -> list[dict[str, object]]:
        return await self._inner.search_history(query)

    async def recall(self, query: str, limit: int = 5) -> list[Recalled]:
        return await self._inner.recall(query, limit)

    async def remember(self, text: str) -> str:
        return await self._inner.remember(text)

    async def latest_message_id(self) -> int:
        return await self._inner.latest_message_id()

    async def read_resume_state(
        self, model: str, system_prompt: str, *, with_tools: bool
    ) -> dict[str, Any] | None:
        return await self._inner.read_resume_state(model, system_prompt, with_tools=with_tools)

    async def write_resume_state(
        self, model: str, system_prompt: str, state: dict[str, Any], *, with_tools: bool
    ) -> None:
        await self._inner.write_resume_state(model, system_prompt, state, with_tools=with_tools)
