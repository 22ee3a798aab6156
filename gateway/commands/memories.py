"""/remember, /memories and /forget ID: what a member asks the bot to remember about them.

A memory belongs to the member (every identity linked to theirs) and reaches the agent only in
their own tasks, in any chat (gateway/memory/remembered.py). Anyone may keep, list and remove
their own; nobody may see or remove another's. /forget alone clears the session's tool memory
instead (failed calls and cached results), which in a shared chat only its admins may do.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.auth import Access, Authority
from gateway.clock import Clock
from gateway.commands.registry import (
    Command,
    CommandCall,
    CommandRegistry,
    CommandReply,
    Handler,
)
from gateway.events import NOBODY
from gateway.memory.remembered import MAX_MEMORIES
from gateway.store.member_memories import MemberMemories

NO_MEMBER = (
    "this caller stands for no one member, so nothing is remembered for it; "
    "use a credential of your own (a token issued to you, or your chat account)"
)


class MemoryCommands:
    def __init__(
        self,
        registry: CommandRegistry,
        memories: MemberMemories,
        authority: Authority,
        clock: Clock,
        forget_tool_memory: Handler | None = None,
    ) -> None:
        self.registry = registry
        self.memories = memories
        self.authority = authority
        self.clock = clock
        self._forget_tool_memory = forget_tool_memory

    def register(self) -> None:
        add = self.registry.add
        add(
            Command(
                "remember",
                "keep something about you for your later messages, in any chat",
                Access.anyone,
                self.remember,
                usage="<text>",
            )
        )
        add(Command("memories", "what you asked the bot to remember", Access.anyone, self.list))
        summary = "forget one of your memories"
        if self._forget_tool_memory is not None:
            summary += "; alone, the failed tool calls and cached tool results (admins)"
        add(Command("forget", summary, Access.anyone, self.forget, usage="[memory id]"))

    async def remember(self, call: CommandCall) -> CommandReply:
        who = call.origin.sender_key
        if who in NOBODY:
            return CommandReply(call.name, NO_MEMBER, ok=False)
        try:
            memory, new = await self.memories.add(
                who, call.args, session_id=call.session_id, via="command", at=self.clock.now_ms()
            )
        except ValueError as exc:
            return CommandReply(call.name, str(exc), ok=False)
        if not new:
            return CommandReply(call.name, f"remembered already, as memory {memory.id}")
        return CommandReply(
            call.name,
            f"remembered as memory {memory.id}: the bot knows it when you write, in any chat; "
            f"/forget {memory.id} removes it",
        )

    async def list(self, call: CommandCall) -> CommandReply:
        who = call.origin.sender_key
        if who in NOBODY:
            return CommandReply(call.name, NO_MEMBER, ok=False)
        found = await self.memories.of_member(who)
        if not found:
            return CommandReply(
                call.name, "nothing remembered about you; /remember <text> keeps something"
            )
        lines = [f"Remembered about you ({len(found)} of at most {MAX_MEMORIES}):"]
        for memory in found:
            day = datetime.fromtimestamp(memory.created_at / 1000, UTC).strftime("%Y-%m-%d")
            lines.append(f"{memory.id}. {memory.text} ({day})")
        lines.append("/forget ID removes one.")
        # Theirs alone: where a front-end can show an answer to one member, it does.
        return CommandReply(call.name, "\n".join(lines), private=True)

    async def forget(self, call: CommandCall) -> CommandReply:
        arg = call.args.strip().lstrip("#")
        if not arg:
            return await self._tool_memory(call)
        if not arg.isdigit():
            return CommandReply(
                call.name, "usage: /forget ID (the number /memories shows)", ok=False
            )
        who = call.origin.sender_key
        if who in NOBODY:
            return CommandReply(call.name, NO_MEMBER, ok=False)
        if not await self.memories.remove(who, int(arg)):
            return CommandReply(call.name, f"you have no memory {arg}; /memories lists yours")
        return CommandReply(call.name, f"forgot memory {arg}")

    async def _tool_memory(self, call: CommandCall) -> CommandReply:
        if self._forget_tool_memory is None:
            return CommandReply(
                call.name, "usage: /forget ID (the number /memories shows)", ok=False
            )
        # Like /reset, clearing it changes what the agent knows for everyone in a shared chat.
        if not self.authority.may_configure(call.origin, call.session_id):
            return CommandReply(
                call.name,
                "only an admin may clear the tool memory in a shared chat; "
                "/forget ID removes one of your own memories",
                ok=False,
            )
        return await self._forget_tool_memory(call)
