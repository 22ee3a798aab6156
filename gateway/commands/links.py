"""/link and /unlink: one person's identities on several front-ends joined into one."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.auth import Access
from gateway.commands.registry import Command, CommandCall, CommandRegistry, CommandReply
from gateway.linking import Linking, LinkRefused, describe


class LinkCommands:
    def __init__(self, registry: CommandRegistry, linking: Linking) -> None:
        self.registry = registry
        self.linking = linking

    def register(self) -> None:
        add = self.registry.add
        add(
            Command(
                "link",
                "alone: a one-time code to enter on another front-end; with a code: link to it",
                Access.anyone,
                self.link,
                usage="[code]",
            )
        )
        add(
            Command(
                "unlink",
                "take this identity out of the ones it is linked with",
                Access.anyone,
                self.unlink,
            )
        )

    async def link(self, call: CommandCall) -> CommandReply:
        try:
            if not call.args:
                issued = await self.linking.issue(call.origin)
            else:
                joined = await self.linking.redeem(call.origin, call.args)
        except LinkRefused as exc:
            return CommandReply(call.name, f"⚠️ {exc}", ok=False)
        if call.args:
            own = call.origin.sender_key
            return CommandReply(call.name, f"linked: {own} with {describe(joined, own)}")
        until = datetime.fromtimestamp(issued.expires_at / 1000, UTC).strftime("%H:%M UTC")
        return CommandReply(
            call.name,
            f"link code {issued.code} (once, until {until}): enter /link {issued.code} on "
            "your other front-end. Whoever enters it reads your sessions: give it to nobody.",
            private=True,
        )

    async def unlink(self, call: CommandCall) -> CommandReply:
        if await self.linking.unlink(call.origin):
            return CommandReply(call.name, f"{call.origin.sender_key} is linked with nobody now")
        return CommandReply(call.name, "this identity was not linked", ok=False)
