"""What an agent sees (its context) and what it yields (steps of a run)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gateway.clock import now_ms
from gateway.events import Attachment, Origin
from gateway.knowledge.cited import Cited
from gateway.memory.recalled import Recalled
from gateway.memory.remembered import MemberMemory
from gateway.store.usage import UsageRecord

if TYPE_CHECKING:
    from gateway.agents.tool_memory import ToolMemory


class PastMessage(Protocol):
    """A message of the window before the new one: a history.json line or an archived row."""

    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def sender(self) -> str: ...
    @property
    def send_at(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of reply text as it is produced (streamed, not persisted on its own)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    # Running it again has the same effect as running it once (writing given content, reading):
    # a call a crash cut off is then run again rather than reported as interrupted.
    idempotent: bool = False


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    tool: str
    status: str = "ok"  # ok | error | denied | interrupted
    result: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    model: str
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    elapsed_ms: int = 0
    tool_calls: Sequence[str] = ()

    def record(
        self, session_id: str, task_hash: str, identity: str = "", at: int | None = None
    ) -> UsageRecord:
        """The usage row of this model call, made `at` (now) in `session_id` for
        `task_hash`, asked for by `identity`."""
        return UsageRecord(
            session_id,
            self.model,
            input=self.input,
            output=self.output,
            cache_read=self.cache_read,
            cache_write=self.cache_write,
            elapsed_ms=self.elapsed_ms,
            tool_calls=self.tool_calls,
            send_at=at if at is not None else now_ms(),
            task_hash=task_hash,
            identity=identity,
        )


@dataclass(frozen=True, slots=True)
class Reply:
    """The final reply of the run."""

    text: str


@dataclass(frozen=True, slots=True)
class Switched:
    """The run went on with another model (a fallback chain): which, and why. Written to
    action.log; the reply text marks it only where the earlier model had shown text."""

    from_model: str
    to_model: str
    reason: str  # the failure's kind: rate_limited, quota, server_error, overloaded, ...
    detail: str = ""


Step = Delta | ToolCall | ToolResult | Usage | Reply | Switched


class AgentFailed(Exception):
    """The run cannot produce a reply; the message is shown to the user."""


class BudgetReached(Exception):
    """A budget of the run's requester, or of its shared chat, is spent
    (`AgentContext.before_model_call`): the run ends, answered with this message, which says
    which budget and when it resets."""


class SubagentRefused(Exception):
    """No subagent was started (`AgentContext.delegate`); the message says which limit was
    reached."""


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message that reached a run while it ran (`AgentContext.steering`)."""

    sender: str
    text: str
    attachments: tuple[Attachment, ...] = ()


class AgentContext(Protocol):
    session_id: str
    task_hash: str
    origin: Origin
    text: str
    attachments: Sequence[Attachment]
    history: Sequence[PastMessage]
    workspace: Path
    persona: str  # the session's persona, "" for none
    model: str  # the session's model override, "" for the default
    summary: str  # the rolling summary of older messages, "" for none
    reasoning: str  # the session's reasoning level ("low", "medium", "high"), "" for the default
    allowed_tools: frozenset[str]  # tools the session runs without confirmation (`/allow`)
    # The session's tool cache and error memory (`tools.call_tool`); None: calls run bare.
    tool_memory: ToolMemory | None
    # Older messages of the session, outside the window, similar to the new message (recall).
    recalled: Sequence[Recalled]
    # What the member who asked for this task asked the bot to remember (theirs alone).
    member_memories: Sequence[MemberMemory]
    # Passages of the documents attached where the task runs, found for its message.
    knowledge: Sequence[Cited]

    async def confirm(self, tool: str, args: dict[str, Any]) -> bool:
        """Ask the user who started the run to approve a tool call; False when denied/expired."""
        ...

    async def ask_user(self, question: str, options: Sequence[str] = ()) -> str | None:
        """Ask the user a question; None when it expired unanswered."""
        ...

    async def run_tool(self, call: ToolCall, execute: Callable[[], Awaitable[str]]) -> ToolResult:
        """Run a tool through the router: journaled, and never run twice for one task."""
        ...

    async def before_model_call(self) -> None:
        """Raise BudgetReached when the requester's budgets (or the shared chat's) are spent.
        An agent asks before each call to its model, so a run taken in under its budgets
        stops at them rather than overspend in a tool loop or through subagents."""
        ...

    async def record_file_version(self, directory: str, name: str, content: str) -> None: ...

    async def steering(self) -> list[NewMessage]:
        """Messages sent to the session since the run began that it should take in now, as
        new user turns (the `steer` queue mode); empty otherwise. An agent asks between its
        steps; what it never asks for runs as a follow-up."""
        ...

    async def delegate(self, text: str, key: str = "") -> str:
        """Run `text` as a sub-task in a new temp-* session (its own conversation, this run's
        persona, tools and workspace) and return its final answer. `key` names the sub-task
        the same way in a replay (the tool call's id). Raises SubagentRefused at a limit."""
        ...

    async def search_history(self, query: str) -> list[dict[str, object]]:
        """Full-text search of this session's archive, newest first."""
        ...

    async def recall(self, query: str, limit: int = 5) -> list[Recalled]:
        """The session's messages outside the window most similar to `query` (semantic)."""
        ...

    async def remember(self, text: str) -> str:
        """Keep `text` as a memory of the member who asked; what to tell the model. Raises
        ValueError when it cannot be kept (too long, too many, no member)."""
        ...

    async def latest_message_id(self) -> int:
        """Id of the session's newest archived message (0 for none): what its archive is at."""
        ...

    async def read_resume_state(
        self, model: str, system_prompt: str, *, with_tools: bool
    ) -> dict[str, Any] | None:
        """A backend's saved conversation state (`.claude_code/<model>_<hash>.json`), if any."""
        ...

    async def write_resume_state(
        self, model: str, system_prompt: str, state: dict[str, Any], *, with_tools: bool
    ) -> None: ...


class Agent(Protocol):
    """What the core runs, and what it may ask of it: every agent declares each capability,
    so the core never probes for one."""

    name: str
    # Whether the model sees the context's `recalled` memories: only then does the runner pay
    # for a search before each run.
    reads_recall: bool
    # The tools `/allow` may name: those the agent has, and prefixes of those found only once
    # a server runs (`<server>__…`).
    tool_names: frozenset[str]
    tool_prefixes: tuple[str, ...]

    def run(self, ctx: AgentContext) -> AsyncIterator[Step]: ...

    async def aclose(self) -> None:
        """Release what the agent holds (HTTP sessions, files); called once, at stop."""
        ...


@contextlib.asynccontextmanager
async def closing(steps: AsyncIterator[Step]) -> AsyncIterator[AsyncIterator[Step]]:
    """Close the agent's run on the way out, cancel included, so its own clean-up (stopping a
    subprocess, closing a stream) runs now rather than whenever the generator is collected."""
    try:
        yield steps
    finally:
        aclose = getattr(steps, "aclose", None)
        if aclose is not None:
            await aclose()
