"""What the agent sees of a run: the message, the session's settings, summary and recent
window, and the ways back into the engine (prompts, journaled tools, the archive)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gateway.agents.base import (
    Agent,
    NewMessage,
    PastMessage,
    SubagentRefused,
    ToolCall,
    ToolResult,
)
from gateway.agents.summary import fold_batch
from gateway.agents.tool_memory import ToolMemory
from gateway.clock import now_ms
from gateway.engine.journal import Steered
from gateway.engine.prompts import Prompts
from gateway.engine.task import Task
from gateway.events import NOBODY
from gateway.knowledge.cited import Cited
from gateway.memory.recalled import Recalled
from gateway.memory.remembered import MemberMemory
from gateway.profiles.spec import DEFAULT
from gateway.store.history_file import HistoryMessage
from gateway.store.sessions import SessionStore

if TYPE_CHECKING:
    from gateway.knowledge.service import Knowledge
    from gateway.memory.recall import Recall

# Raises BudgetReached when the task's budgets are spent (the runner's, before a model call).
BudgetCheck = Callable[[], Awaitable[None]]
RunTool = Callable[[Task, ToolCall, Callable[[], Awaitable[str]]], Awaitable[ToolResult]]
# Hands a running task the messages it takes in now (the `steer` queue mode).
Steer = Callable[[Task], Awaitable[list[Steered]]]
# Semantic recall (`gateway.memory.recall.Recall.search`, bound): session, query, how many, and
# the oldest message id of the window (only older messages are recalled).
Recaller = Callable[[str, str, int, int], Awaitable[list[Recalled]]]


class Subagents(Protocol):
    """Runs sub-tasks for a run (gateway/engine/subagents.py)."""

    async def run(self, parent: RunContext, text: str, key: str = "") -> str: ...


class RunContext:
    """The `AgentContext` of one task."""

    def __init__(
        self,
        task: Task,
        store: SessionStore,
        prompts: Prompts,
        run_tool: RunTool,
        history: Sequence[PastMessage],
        tool_memory: ToolMemory | None = None,
        steer: Steer | None = None,
        subagents: Subagents | None = None,
    ) -> None:
        self._task = task
        self._subagents = subagents
        # Subagents (gateway/engine/subagents.py): this run's depth (0: a task's own run), the
        # task's own run, how many it started, and what is held until the task ends.
        self.depth = 0
        self._root: RunContext | None = None  # None: this is the task's own run
        self.delegations = 0
        self.cleanup = contextlib.AsyncExitStack()
        self._store = store
        self._prompts = prompts
        self._run_tool = run_tool
        self._steer = steer
        self.session_id = task.session_id
        self.task_hash = task.task_hash
        self.origin = task.origin
        self.text = task.text
        self.attachments = task.attachments
        self.history: Sequence[PastMessage] = history
        self.workspace = store.files(task.session_id).dir / "workspace"
        self.persona = ""
        self.model = ""
        self.summary = ""
        self.reasoning = ""
        self.allowed_tools: frozenset[str] = frozenset()
        self.tool_memory = tool_memory
        # Whether the rolling summary may have a batch to fold once this task has ended.
        self.fold_soon = False
        self.recalled: Sequence[Recalled] = ()
        # What the member who asked (never anyone else) asked the bot to remember.
        self.member_memories: Sequence[MemberMemory] = ()
        # Passages of the documents attached where it runs, found for its message.
        self.knowledge: Sequence[Cited] = ()
        self.recaller: Recaller | None = None
        self.window_start = 0  # the oldest message id in the window: recall stays below it
        self.budget: BudgetCheck | None = None
        # The agent that runs the task (its profile's); its subagents run the same one.
        self.agent: Agent | None = None

    @property
    def root(self) -> RunContext:
        """The task's own run (this one, or the one a subagent's run descends from). Not an
        attribute pointing at itself: that cycle kept every finished run, its summary and its
        window, in memory until the collector's rare full pass."""
        return self._root or self

    async def confirm(self, tool: str, args: dict[str, Any]) -> bool:
        answer = await self._prompts.ask(
            self._task, "confirm", tool=tool, args=args, auto_approve=tool in self.allowed_tools
        )
        return bool(answer.approved)

    async def ask_user(self, question: str, options: Sequence[str] = ()) -> str | None:
        answer = await self._prompts.ask(self._task, "ask_user", question=question, options=options)
        return answer.text

    async def run_tool(self, call: ToolCall, execute: Callable[[], Awaitable[str]]) -> ToolResult:
        return await self._run_tool(self._task, call, execute)

    async def before_model_call(self) -> None:
        if self.budget is not None:
            await self.budget()

    async def steering(self) -> list[NewMessage]:
        """Messages sent to the session since this run began, now this run's to answer (the
        `steer` queue mode); empty in every other mode."""
        if self._steer is None:
            return []
        taken = await self._steer(self._task)
        return [NewMessage(s.head.origin.sender_name, s.head.text, s.attachments) for s in taken]

    async def delegate(self, text: str, key: str = "") -> str:
        """Run `text` as a sub-task in a new temp-* session and answer with its reply."""
        if self._subagents is None:
            raise SubagentRefused("subagents are not available here")
        return await self._subagents.run(self, text, key)

    async def search_history(self, query: str) -> list[dict[str, object]]:
        hits = await self._store.search.messages(query, session_id=self.session_id)
        return [
            {
                "id": h.id,
                "role": h.role,
                "sender": h.sender,
                "content": h.content,
                "send_at": h.send_at,
            }
            for h in hits
        ]

    async def recall(self, query: str, limit: int = 5) -> list[Recalled]:
        if self.recaller is None:
            return []
        return await self.recaller(self.session_id, query, limit, self.window_start)

    async def remember(self, text: str) -> str:
        """Keep `text` as a memory of the member who asked (they agreed to the call)."""
        identity = self.origin.sender_key
        if identity in NOBODY:
            raise ValueError("this caller stands for no one member: nothing is remembered")
        memory, new = await self._store.member_memories.add(
            identity, text, session_id=self.session_id, via="tool", at=now_ms()
        )
        if not new:
            return f"already remembered (memory {memory.id})"
        return f"remembered as memory {memory.id}; the member can list it with /memories"

    async def latest_message_id(self) -> int:
        return await self._store.last_message_id(self.session_id)

    async def record_file_version(self, directory: str, name: str, content: str) -> None:
        await self._store.record_file_version(
            self.session_id, self.task_hash, directory, name, content
        )

    async def read_resume_state(
        self, model: str, system_prompt: str, *, with_tools: bool
    ) -> dict[str, Any] | None:
        files = self._store.files(self.session_id)
        return await asyncio.to_thread(
            files.read_resume_state, model, system_prompt, with_tools=with_tools
        )

    async def write_resume_state(
        self, model: str, system_prompt: str, state: dict[str, Any], *, with_tools: bool
    ) -> None:
        files = self._store.files(self.session_id)
        await asyncio.to_thread(
            files.write_resume_state, model, system_prompt, state, with_tools=with_tools
        )


async def load_context(
    task: Task,
    store: SessionStore,
    prompts: Prompts,
    run_tool: RunTool,
    window: int,
    tool_memory: ToolMemory | None = None,
    *,
    steer: Steer | None = None,
    subagents: Subagents | None = None,
    recall: Recall | None = None,
    recall_into_context: bool = True,
    knowledge: Knowledge | None = None,
    profile: str = DEFAULT,
) -> RunContext:
    """The context of `task`: session settings and summary from SQL, window from its files.
    With `recall_into_context` (an agent that shows `recalled` to its model), the older
    messages most like the task's are recalled before it runs, otherwise only on demand; and
    the passages of the documents attached where it runs (`knowledge`, for `profile`) found."""
    # Two reads that do not wait on each other, asked together: on SQLite the lean reads'
    # thread takes them in one batch (one hand-off), on PostgreSQL they go out side by side.
    read, memories = await asyncio.gather(
        store.context_read(task.session_id, window, tail=window + fold_batch(window) + 1),
        _memories_of(store, task.origin.sender_key),
    )
    summary, row = read.summary, read.settings
    cursor = summary.cursor if summary else 0
    recent, oldest = _window(task, read.recent, window, after=cursor)
    context = RunContext(task, store, prompts, run_tool, recent, tool_memory, steer, subagents)
    # Below the window, and never the task's own message (archived, maybe embedded already).
    context.window_start = min((i for i in (oldest, task.user_message_id) if i), default=0)
    if recall is not None:
        context.recaller = recall.bound
        if recall_into_context:
            start = context.window_start
            context.recalled = await recall.for_context(task.session_id, task.text, start)
    if knowledge is not None and recall_into_context:
        context.knowledge = await knowledge.for_task(
            task.session_id, task.origin, profile, task.text
        )
    context.member_memories = memories
    if row is not None:
        context.persona = row.persona
        context.model = row.model
        context.reasoning = row.reasoning
        context.allowed_tools = row.allowed_tools
    context.summary = summary.text if summary else ""
    # This task adds its reply (its message is archived already): the window moves by one.
    context.fold_soon = read.due + 1 >= fold_batch(window)
    return context


async def _memories_of(store: SessionStore, identity: str) -> list[MemberMemory]:
    if identity in NOBODY:
        return []
    return await store.member_memories.of_member(identity)


def _window(
    task: Task, recent: list[HistoryMessage], size: int, *, after: int
) -> tuple[list[HistoryMessage], int]:
    """The recent conversation from history.json's last lines (`recent`, one more than the
    most a window takes), without the task's own message: the last `size` messages, and
    before them those the summary does not cover yet (id above `after`), up to a fold batch
    more; and the oldest archive id among them (0 when none is known)."""
    most = size + fold_batch(size)
    text = task.text.replace("\x00", "\ufffd")  # as the archive stored it
    for index in range(len(recent) - 1, -1, -1):
        line = recent[index]
        own = line.role == "user" and line.content == text
        if own and task.user_sent_at in (0, line.send_at):
            del recent[index]
            break
    recent = recent[-most:]
    older = len(recent) - size
    while older > 0 and not (recent[0].id > after):  # covered by the summary
        recent.pop(0)
        older -= 1
    oldest = min((m.id for m in recent if m.id), default=0)
    return recent, oldest
