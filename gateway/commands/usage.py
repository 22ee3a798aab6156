"""/usage: what a member has spent against their quotas (`/usage me`), and in a shared chat,
for its admins, what each member spent there."""

from __future__ import annotations

from gateway.auth import Access, Authority
from gateway.commands.registry import Command, CommandCall, CommandRegistry, CommandReply
from gateway.ownership import is_shared
from gateway.quotas import Admission, day_start
from gateway.store.usage import month_start

MAX_MEMBERS = 20  # lines of a chat's listing; the rest are counted


def _of(used: int, limit: int) -> str:
    return f"{used:,} of {limit:,}" if limit else f"{used:,} (no limit)"


class UsageCommands:
    def __init__(
        self, registry: CommandRegistry, admission: Admission, authority: Authority
    ) -> None:
        self.registry = registry
        self.admission = admission
        self.authority = authority

    def register(self) -> None:
        self.registry.add(
            Command(
                "usage",
                "tokens spent against your budgets; in a chat, per member (admins)",
                Access.anyone,
                self.usage,
                usage="[me]",
            )
        )

    async def usage(self, call: CommandCall) -> CommandReply:
        if call.args.strip().lower() == "me" or not is_shared(call.session_id):
            return CommandReply(call.name, await self.mine(call))
        if call.args.strip():
            return CommandReply(call.name, "usage: /usage [me]", ok=False)
        if not self.authority.is_admin(call.origin):
            return CommandReply(
                call.name, "only admins see each member's usage; /usage me for yours", ok=False
            )
        return CommandReply(call.name, await self.members(call.session_id))

    async def mine(self, call: CommandCall) -> str:
        admission = self.admission
        person = await admission.person(call.origin.sender_key)
        now = admission.clock.now_ms()
        usage = admission.store.usage
        today = await usage.tokens(since_ms=day_start(now), identities=person.identities)
        month = await usage.tokens(since_ms=month_start(now), identities=person.identities)
        owned = await admission.quotas.sessions_owned(person.identities)
        limits = person.limits
        lines = [
            f"tokens today: {_of(today, limits['tokens_day'])} (resets 00:00 UTC)",
            f"tokens this month: {_of(month, limits['tokens_month'])}",
            f"sessions owned: {_of(owned, limits['sessions'])}",
            f"messages a minute: {limits['messages_per_minute'] or 'no limit'}",
        ]
        if len(person.identities) > 1:
            lines.append(f"counted together: {', '.join(sorted(person.identities))}")
        if person.exempt:
            lines.append("as a gateway admin, no quota applies to you")
        return "\n".join(lines)

    async def members(self, session_id: str) -> str:
        admission = self.admission
        now = admission.clock.now_ms()
        usage = admission.store.usage
        rows = await usage.by_identity(since_ms=month_start(now), session_id=session_id)
        today = {
            r.identity: r.input + r.output
            for r in await usage.by_identity(since_ms=day_start(now), session_id=session_id)
        }
        limits = await admission.chat(session_id)
        spent_today = sum(today.values())
        lines = [
            f"this chat today: {_of(spent_today, limits['tokens_day'])}; this month: "
            f"{_of(sum(r.input + r.output for r in rows), limits['tokens_month'])}"
        ]
        for row in rows[:MAX_MEMBERS]:
            who = row.identity or "(before identities were kept)"
            lines.append(
                f"{who}: {today.get(row.identity, 0):,} today, "
                f"{row.input + row.output:,} this month in {row.calls:,} calls"
            )
        if len(rows) > MAX_MEMBERS:
            lines.append(f"… and {len(rows) - MAX_MEMBERS} more")
        return "\n".join(lines)
