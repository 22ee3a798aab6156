"""Gateway commands: handled by the router for every adapter before the agent sees the text."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.clock import now_ms
from gateway.events import Inbound
from gateway.ids import Prefix, new_session_id, prefix_of

if TYPE_CHECKING:
    from gateway.router import Router

HELP = """Commands:
/help    this list
/status  session, running task, queue length and model
/cancel  cancel the running task
/reset   clear the conversation window and summary (admins only in shared chats)
/new     start a new terminal session (terminal only)
/model <name>    use another model in this session (admins only in shared chats)
/persona <text>  give the agent a persona in this session (admins only in shared chats)
/reasoning <low|medium|high|default>  how hard the model thinks (admins only in shared chats)
/allow [tool]    run a tool without asking for confirmation here; alone: show the list
/disallow <tool> ask for confirmation again before the tool runs
Anything else is a message for the agent."""

SHARED_PREFIXES = frozenset({Prefix.dc, Prefix.tg})


@dataclass(frozen=True, slots=True)
class CommandReply:
    name: str
    text: str
    ok: bool = True
    session_id: str = ""  # set by /new: the session to switch to


REASONING_LEVELS = frozenset({"low", "medium", "high", "default"})
TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")


def parse_command(text: str) -> tuple[str, str] | None:
    """`/status@my_bot args` → ("status", "args"); None when the text is not a command."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2:
        return None
    head, _, rest = stripped[1:].partition(" ")
    name = head.split("@", 1)[0].lower()
    return name, rest.strip()


async def run_command(router: Router, inbound: Inbound) -> CommandReply | None:
    parsed = parse_command(inbound.text)
    if parsed is None:
        return None
    name, args = parsed
    sid = inbound.session_id
    origin = inbound.origin
    is_admin = origin.is_admin or origin.sender_key in router.settings.admin_keys
    if name == "help":
        return CommandReply(name, HELP)
    if name == "status":
        row = await router.store.get(sid)
        running = router.running_task(sid)
        model = (row.model if row else "") or router.agent.name
        lines = [
            f"session: {sid}",
            f"running: {running.task_hash if running else 'nothing'}",
            f"queued: {router.queue_length(sid)}",
            f"model: {model}",
            f"reasoning: {(row.reasoning if row else '') or 'default'}",
        ]
        return CommandReply(name, "\n".join(lines))
    if name == "cancel":
        running = router.running_task(sid)
        if running is None:
            return CommandReply(name, "nothing is running", ok=False)
        same_sender = (
            running.origin.platform == origin.platform
            and running.origin.sender_id == origin.sender_id
        )
        if not (same_sender or is_admin):
            who = running.origin.sender_name or running.origin.sender_id
            return CommandReply(name, f"only {who} or an admin may cancel this task", ok=False)
        by = origin.sender_name or origin.sender_id or origin.platform
        await router.cancel(sid, running.task_hash, by=by)
        return CommandReply(name, f"canceled {running.task_hash}")
    if name == "reset":
        if prefix_of(sid) in SHARED_PREFIXES and not is_admin:
            return CommandReply(name, "only an admin may reset a shared chat", ok=False)
        if await router.store.get(sid) is None:
            return CommandReply(name, "nothing to reset")
        last = await router.store.last_message_id(sid)
        await asyncio.to_thread(router.store.files(sid).reset_conversation, last, now_ms())
        return CommandReply(name, "conversation window and summary cleared")
    if name in ("model", "persona"):
        if prefix_of(sid) in SHARED_PREFIXES and not is_admin:
            return CommandReply(name, f"only an admin may change the {name} here", ok=False)
        await router.store.ensure(sid)
        if not args:
            row = await router.store.get(sid)
            current = (row.model if name == "model" else row.persona) if row else ""
            return CommandReply(name, f"{name}: {current or '(default)'}")
        await router.store.update(sid, **{name: args})
        return CommandReply(name, f"{name} set to: {args}")
    if name == "reasoning":
        if prefix_of(sid) in SHARED_PREFIXES and not is_admin:
            return CommandReply(name, "only an admin may change the reasoning level here", ok=False)
        await router.store.ensure(sid)
        if not args:
            row = await router.store.get(sid)
            return CommandReply(name, f"reasoning: {(row.reasoning if row else '') or 'default'}")
        level = args.lower()
        if level not in REASONING_LEVELS:
            choices = ", ".join(sorted(REASONING_LEVELS))
            return CommandReply(
                name, f"unknown reasoning level {args!r}; use one of: {choices}", ok=False
            )
        await router.store.update(sid, reasoning="" if level == "default" else level)
        return CommandReply(name, f"reasoning set to: {level}")
    if name in ("allow", "disallow"):
        return await _allow(router, sid, name, args, is_admin=is_admin)
    if name == "new":
        if origin.platform != "terminal":
            return CommandReply(name, "/new is available in the terminal only", ok=False)
        fresh = new_session_id(Prefix.cli)
        await router.store.ensure(fresh)
        return CommandReply(name, f"new session {fresh}", session_id=fresh)
    return None  # an unknown /word is a message for the agent


async def _allow(router: Router, sid: str, name: str, args: str, *, is_admin: bool) -> CommandReply:
    await router.store.ensure(sid)
    if not args:
        if name == "disallow":
            return CommandReply(name, "usage: /disallow <tool>", ok=False)
        row = await router.store.get(sid)
        listed = sorted(row.allowed_tools) if row else []
        shown = ", ".join(listed) if listed else "nothing; every gated tool asks first"
        return CommandReply(name, f"allowed without confirmation: {shown}")
    # Skipping confirmations hands the agent more power than any one chat member should grant.
    if not is_admin and prefix_of(sid) in SHARED_PREFIXES:
        return CommandReply(name, "only an admin may change which tools run unasked", ok=False)
    tool = args.split()[0]
    if not TOOL_NAME.fullmatch(tool):
        return CommandReply(name, f"{tool!r} is not a tool name", ok=False)
    known: frozenset[str] | None = getattr(router.agent, "tool_names", None)
    if name == "allow" and known is not None and tool not in known:
        names = ", ".join(sorted(known))
        return CommandReply(name, f"the agent has no tool {tool!r}; its tools: {names}", ok=False)
    allowed = await router.store.set_tool_allowed(sid, tool, name == "allow")
    if name == "allow":
        return CommandReply(name, f"{tool} now runs without asking in this session")
    shown = ", ".join(sorted(allowed)) or "nothing"
    return CommandReply(name, f"{tool} asks for confirmation again (allowed: {shown})")
