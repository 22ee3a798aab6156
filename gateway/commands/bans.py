"""/ban, /unban and /bans: a shared chat's admins keep a member out of their chat
(`gateway/bans.py` says what a ban does)."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.auth import Access
from gateway.bans import Bans, chat_scope, identity_of
from gateway.commands.registry import Command, CommandCall, CommandRegistry, CommandReply
from gateway.ownership import is_shared
from gateway.store.ownership import Ownership

CHAT_PLATFORMS = frozenset({"discord", "telegram"})


class BanCommands:
    def __init__(self, registry: CommandRegistry, bans: Bans, ownership: Ownership) -> None:
        self.registry = registry
        self.bans = bans
        self.ownership = ownership

    def register(self) -> None:
        add = self.registry.add
        add(
            Command(
                "ban",
                "keep a member out of this chat: the bot ignores them",
                Access.shared_admin,
                self.ban,
                usage="<member> [reason]",
                platforms=CHAT_PLATFORMS,
            )
        )
        add(
            Command(
                "unban",
                "let a banned member write to the bot again",
                Access.shared_admin,
                self.unban,
                usage="<member>",
                platforms=CHAT_PLATFORMS,
            )
        )
        add(
            Command(
                "bans",
                "who is banned in this chat",
                Access.shared_admin,
                self.list,
                platforms=CHAT_PLATFORMS,
            )
        )

    async def ban(self, call: CommandCall) -> CommandReply:
        refused = self._not_here(call)
        if refused is not None:
            return refused
        target, _, reason = call.args.partition(" ")
        try:
            identity = identity_of(target, call.origin.platform)
        except ValueError as exc:
            return CommandReply(call.name, f"{exc}; usage: /ban <member> [reason]", ok=False)
        if identity == call.origin.sender_key:
            return CommandReply(call.name, "you cannot ban yourself", ok=False)
        linked = await self.ownership.linked(identity)
        admins = self.bans.authority.admins
        if linked & admins or await self.bans.is_chat_admin(call.session_id, identity):
            return CommandReply(call.name, f"{identity} is an admin: not banned", ok=False)
        scope = chat_scope(call.session_id)
        try:
            added = await self.bans.ban(
                scope, identity, by=call.origin.sender_key, reason=reason.strip()
            )
        except ValueError as exc:
            return CommandReply(call.name, str(exc), ok=False)
        if not added:
            return CommandReply(call.name, f"{identity} is banned here already")
        return CommandReply(call.name, f"banned {identity}: the bot ignores them in this chat")

    async def unban(self, call: CommandCall) -> CommandReply:
        refused = self._not_here(call)
        if refused is not None:
            return refused
        try:
            identity = identity_of(call.args.split(" ", 1)[0], call.origin.platform)
        except ValueError as exc:
            return CommandReply(call.name, f"{exc}; usage: /unban <member>", ok=False)
        scope = chat_scope(call.session_id)
        if not await self.bans.unban(scope, identity, by=call.origin.sender_key):
            return CommandReply(call.name, f"{identity} is not banned here", ok=False)
        return CommandReply(call.name, f"unbanned {identity}")

    async def list(self, call: CommandCall) -> CommandReply:
        refused = self._not_here(call)
        if refused is not None:
            return refused
        bans = await self.bans.listed(chat_scope(call.session_id))
        if not bans:
            return CommandReply(call.name, "nobody is banned in this chat")
        lines = ["banned in this chat:"]
        for ban in bans:
            when = datetime.fromtimestamp(ban.created_at / 1000, UTC).strftime("%Y-%m-%d %H:%M")
            why = f": {ban.reason}" if ban.reason else ""
            lines.append(f"{ban.identity} (by {ban.banned_by}, {when} UTC){why}")
        return CommandReply(call.name, "\n".join(lines))

    @staticmethod
    def _not_here(call: CommandCall) -> CommandReply | None:
        if is_shared(call.session_id):
            return None
        return CommandReply(call.name, f"/{call.name} is for shared chats", ok=False)
