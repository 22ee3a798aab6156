"""The gateway's own commands, the same on every front-end."""

from __future__ import annotations

from gateway.agents.tool_memory import ToolMemory
from gateway.auth import Access
from gateway.clock import Clock
from gateway.commands.ids import IdCommands
from gateway.commands.registry import Command, CommandCall, CommandRegistry, CommandReply
from gateway.engine.cancels import Canceled
from gateway.engine.errors import TaskNotFound
from gateway.engine.router import Router
from gateway.ids import InvalidHash, Prefix, new_session_id
from gateway.logs import get_logger
from gateway.session_settings import (
    QUEUE_MODES,
    SessionSettings,
    SettingsChange,
    SettingsRefused,
)
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

# What /cancel says of where the task it canceled stood.
_STOOD: dict[Canceled, str] = {
    "running": "it was running",
    "waiting_for_slot": "it was waiting for a free slot",
    "queued": "it was waiting in this conversation's queue",
    "elsewhere": "it ran on another instance",
}


class BuiltinCommands:
    def __init__(
        self,
        registry: CommandRegistry,
        router: Router,
        store: SessionStore,
        settings: SessionSettings,
        agent_name: str,
        clock: Clock,
        tool_memory: ToolMemory | None = None,
    ) -> None:
        self.registry = registry
        self.router = router
        self.store = store
        self.settings = settings
        self.agent_name = agent_name
        self.clock = clock
        self.tool_memory = tool_memory

    def register(self) -> None:
        add = self.registry.add
        add(Command("help", "this list", Access.anyone, self.help))
        add(Command("status", "session, running task, queue and model", Access.anyone, self.status))
        add(
            Command(
                "cancel",
                "cancel the running task, or the one waiting for a slot; or the task named",
                Access.requester,
                self.cancel,
                usage="[task]",
            )
        )
        add(
            Command(
                "reset",
                "clear the conversation window and summary",
                Access.shared_admin,
                self.reset,
            )
        )
        add(
            Command(
                "new",
                "start a new session",
                Access.anyone,
                self.new,
                platforms=frozenset({"terminal"}),
            )
        )
        IdCommands(self.registry).register()  # /id: Telegram's, like /new is the terminal's
        for name, usage, summary in (
            ("model", "<name>", "use another model in this session"),
            ("persona", "<text>", "give the agent a persona in this session"),
            ("reasoning", "<low|medium|high|default>", "how hard the model thinks"),
        ):
            add(
                Command(
                    name,
                    summary,
                    Access.shared_admin,
                    self.setting,
                    usage=usage,
                    reads_without_args=True,
                )
            )
        add(
            Command(
                "allow",
                "run a tool without asking here; alone: the list",
                Access.shared_admin,
                self.allow,
                usage="[tool]",
                reads_without_args=True,
            )
        )
        add(
            Command(
                "disallow",
                "ask for confirmation again before the tool runs",
                Access.shared_admin,
                self.allow,
                usage="<tool>",
            )
        )

        add(
            Command(
                "queue",
                "what messages sent during a run do; alone: the mode",
                Access.shared_admin,
                self.queue,
                usage="<followup|collect|steer|interrupt>",
                reads_without_args=True,
            )
        )

    async def help(self, call: CommandCall) -> CommandReply:
        return CommandReply(call.name, self.registry.help_text())

    async def status(self, call: CommandCall) -> CommandReply:
        sid = call.session_id
        row = await self.store.get(sid)
        running = self.router.running_task(sid)
        lines = [
            f"session: {sid}",
            f"running: {running.task_hash if running else 'nothing'}",
            f"queued: {self.router.queue_length(sid)}",
            f"model: {(row.model if row else '') or self.agent_name}",
            f"reasoning: {(row.reasoning if row else '') or 'default'}",
            f"queue mode: {row.queue_mode if row else 'followup'}",
        ]
        return CommandReply(call.name, "\n".join(lines))

    async def cancel(self, call: CommandCall) -> CommandReply:
        sid = call.session_id
        named = call.args.split()[0] if call.args.strip() else ""
        target = self.router.cancel_target(sid) if not named else None
        task_hash = named or (target.task_hash if target else "")
        if not task_hash:
            return CommandReply(call.name, "nothing is running or waiting", ok=False)
        try:
            stood = await self.router.cancel_for(call.origin, sid, task_hash)
        except (TaskNotFound, InvalidHash):
            return CommandReply(call.name, f"no task {task_hash[:64]} here", ok=False)
        if stood is None:
            return CommandReply(call.name, f"{task_hash} had already ended", ok=False)
        # The running task is what /cancel has always meant; anything else says where it was.
        where = f" ({_STOOD[stood]})" if stood != "running" else ""
        return CommandReply(call.name, f"canceled {task_hash}{where}")

    async def reset(self, call: CommandCall) -> CommandReply:
        sid = call.session_id
        if await self.store.get(sid) is None:
            return CommandReply(call.name, "nothing to reset")
        last = await self.store.last_message_id(sid)
        await self.store.reset_conversation(sid, last, self.clock.now_ms())
        return CommandReply(call.name, "conversation window and summary cleared")

    async def forget_tool_memory(self, call: CommandCall) -> CommandReply:
        """/forget alone (gateway/commands/memories.py: /forget ID is a member's memory)."""
        assert self.tool_memory is not None  # offered only with one
        try:
            failures, _cache_keys = await self.tool_memory.forget(call.session_id)
        except Exception:
            log.warning("forget failed", session=call.session_id, exc_info=True)
            return CommandReply(
                call.name, "the memory store cannot be reached; try again", ok=False
            )
        return CommandReply(
            call.name,
            f"forgot {failures} failed tool call{'' if failures == 1 else 's'} "
            "and cleared the tool cache",
        )

    async def new(self, call: CommandCall) -> CommandReply:
        fresh = new_session_id(Prefix.cli)
        await self.store.ensure(fresh)
        return CommandReply(call.name, f"new session {fresh}", session_id=fresh)

    async def setting(self, call: CommandCall) -> CommandReply:
        """/model, /persona, /reasoning: alone they show the value, with an argument set it."""
        sid, name = call.session_id, call.name
        await self.store.ensure(sid)
        if not call.args:
            row = await self.store.require(sid)
            current = {"model": row.model, "persona": row.persona, "reasoning": row.reasoning}
            fallback = "default" if name == "reasoning" else "(default)"
            return CommandReply(name, f"{name}: {current[name] or fallback}")
        try:
            await self.settings.change(sid, call.origin, SettingsChange(**{name: call.args}))
        except SettingsRefused as exc:
            return CommandReply(name, str(exc), ok=False)
        shown = call.args.lower() if name == "reasoning" else call.args
        return CommandReply(name, f"{name} set to: {shown}")

    async def queue(self, call: CommandCall) -> CommandReply:
        sid = call.session_id
        if not call.args:
            row = await self.store.get(sid)
            mode = row.queue_mode if row else "followup"
            return CommandReply(call.name, f"queue: {mode}: {QUEUE_MODES.get(mode, '?')}")
        try:
            mode = await self.settings.set_queue_mode(sid, call.origin, call.args)
        except SettingsRefused as exc:
            return CommandReply(call.name, str(exc), ok=False)
        return CommandReply(call.name, f"queue set to {mode}: {QUEUE_MODES[mode]}")

    async def allow(self, call: CommandCall) -> CommandReply:
        sid, name = call.session_id, call.name
        if not call.args:
            if name == "disallow":
                return CommandReply(name, "usage: /disallow <tool>", ok=False)
            row = await self.store.get(sid)
            listed = sorted(row.allowed_tools) if row else []
            shown = ", ".join(listed) if listed else "nothing; every gated tool asks first"
            return CommandReply(name, f"allowed without confirmation: {shown}")
        tool = call.args.split()[0]
        try:
            allowed = await self.settings.allow(sid, call.origin, tool, name == "allow")
        except SettingsRefused as exc:
            return CommandReply(name, str(exc), ok=False)
        if name == "allow":
            return CommandReply(name, f"{tool} now runs without asking in this session")
        shown = ", ".join(sorted(allowed)) or "nothing"
        return CommandReply(name, f"{tool} asks for confirmation again (allowed: {shown})")
