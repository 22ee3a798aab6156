"""/export_me and /forget_me (also typed `/export-me`, `/forget-me`): a member's own data
from any chat. /export_me says what is kept and carries the whole document as a file, which a
front-end hands over only where the member alone sees it (a Discord slash command's ephemeral
answer, their private chat with the Telegram bot); it is also downloaded with
`GET /v1/me/export`, `agenvoy export-me`, or the operator's `agenvoy export IDENTITY`.
/forget_me asks first and erases once confirmed."""

from __future__ import annotations

import json
import re

from gateway.auth import Access
from gateway.commands.registry import (
    Command,
    CommandCall,
    CommandRegistry,
    CommandReply,
    Document,
)
from gateway.member_data.service import MemberData, NotAMember

CONFIRM = "confirm"


def export_name(identity: str) -> str:
    """The document's file name: the identity in characters any file system takes."""
    return f"agenvoy-export-{re.sub(r'[^A-Za-z0-9_-]', '_', identity)[:80]}.json"


class MemberCommands:
    def __init__(self, registry: CommandRegistry, members: MemberData) -> None:
        self.registry = registry
        self.members = members

    def register(self) -> None:
        add = self.registry.add
        add(
            Command(
                "export_me",
                "what is stored about you, and how to download it",
                Access.anyone,
                self.export,
            )
        )
        add(
            Command(
                "forget_me",
                "erase what you wrote here and everywhere (asks first)",
                Access.anyone,
                self.forget,
                usage=f"[{CONFIRM}]",
            )
        )

    async def export(self, call: CommandCall) -> CommandReply:
        who = call.origin.sender_key
        try:
            found = await self.members.export(who)
        except NotAMember as exc:
            return CommandReply(call.name, str(exc), ok=False)
        counts = ", ".join(
            f"{len(found[key])} {label}"
            for key, label in (
                ("messages", "messages"),
                ("replies", "replies to you"),
                ("schedules", "schedules"),
                ("usage", "usage rows"),
                ("sessions_owned", "sessions you own"),
                ("memories", "memories"),
            )
        )
        data = json.dumps(found, ensure_ascii=False, indent=2).encode()
        return CommandReply(
            call.name,
            f"Stored about {who}: {counts}. The whole document (JSON) comes where you alone "
            "see it: as the answer to the Discord slash command /export_me, or in your "
            "private chat with the Telegram bot. It is also downloaded with "
            f"GET /v1/me/export (your own token) or from the operator (`agenvoy export {who}`).",
            private=True,
            document=Document(export_name(who), data),
        )

    async def forget(self, call: CommandCall) -> CommandReply:
        who = call.origin.sender_key
        try:
            if call.args.strip().lower() != CONFIRM:
                found = await self.members.preview(who)
                return CommandReply(
                    call.name,
                    f"This erases {found.own} messages you wrote and {found.replies} replies "
                    f"to them, in {len(found.sessions)} sessions, your schedules and memories; it "
                    f"cannot be undone. Send /forget_me {CONFIRM} to go on.",
                )
            done = await self.members.forget(who, by=who)
        except NotAMember as exc:
            return CommandReply(call.name, str(exc), ok=False)
        return CommandReply(
            call.name,
            f"Erased: {done.own_messages} messages of yours and {done.replies} replies, "
            f"in {done.sessions} sessions; {done.schedules} schedules and "
            f"{done.memories} memories removed.",
        )
