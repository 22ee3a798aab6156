"""Subagents: a task hands a sub-task to a new `temp-*` session and waits for its answer.

The child runs inside its parent's task, in the same coroutine, which is what makes it safe:

- cancelling the parent cancels the child;
- the child's tool calls are journaled in the parent's journal, so a task replayed after a
  crash finds what the child had done and does none of it twice; the child itself is found
  again (its session id comes from the parent task and the sub-task's number) and finishes;
- the child's confirmations and questions are the parent's: asked where the parent was
  started, answerable by the same people;
- its session is held as running until the parent ends, so the reaper leaves it alone.

The child has its own conversation (its session starts with the sub-task), the parent's
persona, model, reasoning and tools (those allowed to run unasked too), and the parent's
workspace, so files it writes are the parent's to read.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Final

from gateway.agents.base import (
    Agent,
    AgentFailed,
    Delta,
    Reply,
    SubagentRefused,
    ToolCall,
    ToolResult,
    Usage,
    closing,
)
from gateway.engine.context import RunContext
from gateway.events import DoneEvent, Event, TextDeltaEvent, TextEvent, UserEvent
from gateway.ids import Prefix
from gateway.logs import get_logger
from gateway.presence import Presence
from gateway.store.sessions import RunRecord, SessionStore
from gateway.store.usage import UsageRecord

log = get_logger(__name__)

# The namespace of child session ids: the same parent task and number give the same child.
_CHILDREN: Final = uuid.UUID("5f0b6a52-6c36-4b8e-9d1c-2a0f7e3c9b41")


def child_session_id(parent_task: str, key: str) -> str:
    """The session of the sub-task `key` (its tool call's id, or its number) of a task."""
    return f"{Prefix.temp.value}-{uuid.uuid5(_CHILDREN, f'{parent_task}/{key}')}"


def child_task_hash(child_session: str) -> str:
    return uuid.uuid5(_CHILDREN, child_session).hex[:16]


Offer = Callable[[Event, str], None]


class ChildContext(RunContext):
    """The context of a subagent's run: its own session and conversation, and everything else
    its parent's: persona, model, tools and workspace, prompts (asked where the parent was
    started), and the journal its tool calls are kept in."""

    def __init__(self, parent: RunContext, session_id: str, task_hash: str, text: str) -> None:
        super().__init__(
            parent._task,
            parent._store,
            parent._prompts,
            parent._run_tool,
            history=(),
            tool_memory=None,  # its cache is the session's; the workspace is the parent's
            steer=None,
            subagents=parent._subagents,
        )
        self._parent = parent
        self.session_id = session_id
        self.task_hash = task_hash
        self.text = text
        self.attachments = ()
        self.workspace = parent.workspace
        self.persona, self.model = parent.persona, parent.model
        self.reasoning, self.allowed_tools = parent.reasoning, parent.allowed_tools
        self.depth = parent.depth + 1
        self._root = parent.root
        self.budget = parent.budget  # the task's requester's and chat's: a child spends theirs
        self.agent = parent.agent  # the task's profile's
        # Who the subagent hears from: the agent that handed it the task, not a person.
        self.origin = replace(parent.origin, sender_id="agent", sender_name="parent agent")

    async def run_tool(self, call: ToolCall, execute: Callable[[], Awaitable[str]]) -> ToolResult:
        # In the parent's journal under a name of its own: a replay finds it there.
        own = replace(call, call_id=f"{self.task_hash}/{call.call_id}")
        result = await self._parent.run_tool(own, execute)
        return replace(result, call_id=call.call_id)

    async def record_file_version(self, directory: str, name: str, content: str) -> None:
        await self._parent.record_file_version(directory, name, content)


@dataclass
class Subagents:
    store: SessionStore
    agent: Agent
    presence: Presence
    offer: Offer  # hands an event to a session's live subscribers
    max_depth: int  # how deep subagents may nest (0: none)
    max_per_task: int  # how many one task may start
    # A usage row with its cost (the price table's), as it is written.
    priced: Callable[[UsageRecord], UsageRecord] = lambda record: record

    async def run(self, parent: RunContext, text: str, key: str = "") -> str:
        """The child's final answer to `text`; raises SubagentRefused or AgentFailed.

        `key` names the sub-task within its task, the same in a replay after a crash: the id
        of the tool call that asked for it; without one, the order in which the task asked."""
        if parent.depth >= self.max_depth:
            raise SubagentRefused(
                f"a subagent may not start another: subagents nest {self.max_depth} deep at most "
                "(AGENVOY_MAX_SUBAGENT_DEPTH)"
            )
        root = parent.root
        if root.delegations >= self.max_per_task:
            raise SubagentRefused(
                f"this task has started {self.max_per_task} subagents, as many as one task may "
                "(AGENVOY_MAX_SUBAGENTS_PER_TASK)"
            )
        number = root.delegations
        root.delegations += 1
        child_id = child_session_id(root.task_hash, key or f"#{number}")
        child_hash = child_task_hash(child_id)
        # Held until the parent ends: the reaper never takes a session its parent still runs.
        await root.cleanup.enter_async_context(self.presence.hold(child_id, child_hash))
        finished = await self.store.finished_run(child_id, child_hash)
        if finished is not None:  # the parent was cut off after its child had answered
            return finished["reply"]
        await self._open(parent, child_id, text)
        child = ChildContext(parent, child_id, child_hash, text)
        log.info("subagent started", parent=parent.task_hash, session=child_id, depth=child.depth)
        # The agent of the task's profile; the gateway's default where none was chosen.
        agent = child.agent or self.agent
        reply = ""
        try:
            async with closing(agent.run(child)) as steps:
                async for step in steps:
                    # Tool calls are journaled and shown through the parent (`run_tool`).
                    if isinstance(step, Delta):
                        delta = TextDeltaEvent(session_id=child_id, text=step.text)
                        await self._note(child, delta)
                    elif isinstance(step, Usage):
                        # Written as it comes, like the parent's: the budgets asked before the
                        # child's next model call count it, and a child that fails has spent.
                        spent = step.record(child_id, root.task_hash, root.origin.sender_key)
                        await self.store.usage.record(self.priced(spent))
                    elif isinstance(step, Reply):
                        reply = step.text
        except AgentFailed as exc:
            raise AgentFailed(f"the subagent failed: {exc}") from exc
        run = RunRecord(child_id, child_hash, text, reply, identity=root.origin.sender_key)
        await self.store.finish_run(run, reply, sender=agent.name)
        await self._note(child, TextEvent(session_id=child_id, text=reply))
        await self._note(child, DoneEvent(session_id=child_id, text=reply))
        log.info("subagent answered", parent=parent.task_hash, session=child_id)
        return reply

    async def _open(self, parent: RunContext, child_id: str, text: str) -> None:
        """The child's session, linked to its parent, with the sub-task as its first message
        (once: a child found again after a crash has it already)."""
        await self.store.adopt(
            child_id,
            parent_session=parent.session_id,
            parent_task=parent.root.task_hash,
            persona=parent.persona,
            model=parent.model,
            reasoning=parent.reasoning,
            allowed_tools=parent.allowed_tools,
            owner=parent.root.origin.sender_key,
        )
        if await self.store.last_message_id(child_id) == 0:
            sender = f"subagent of {parent.session_id}"
            await self.store.append_message(child_id, "user", text, sender=sender)
            event = UserEvent(session_id=child_id, text=text, sender=sender)
            await self._note_in(child_id, "", event, parent.root.origin.sender_key)

    async def _note(self, child: RunContext, event: Event) -> None:
        await self._note_in(child.session_id, child.task_hash, event, child.root.origin.sender_key)

    async def _note_in(self, session_id: str, task_hash: str, event: Event, identity: str) -> None:
        """Into the child's audit trail, for `identity` (whom its parent task acts for), and to
        whoever follows it; never to a chat."""
        event = event.model_copy(update={"task_hash": task_hash})
        body = event.model_dump_json(
            exclude={"kind", "session_id", "task_hash", "window_hash", "at"}
        )
        with contextlib.suppress(FileNotFoundError):
            await self.store.log_action(
                session_id, event.kind, body, task_hash=task_hash, identity=identity
            )
        self.offer(event, session_id)
