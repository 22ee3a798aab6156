"""/usage: what a member has spent against their quotas (`/usage me`), and in a shared chat,
for its admins, what each member spent there. With a price table, spend shows in dollars too.

`/usage me` answers the one who asked alone where the front-end can (a Discord slash command's
ephemeral response). Where it cannot (Telegram answers in the group), the answer holds only
their own figures, and in a shared chat not which other identities are linked with theirs."""

from __future__ import annotations

from gateway.auth import Access, Authority
from gateway.budgets import dollars, money
from gateway.commands.registry import Command, CommandCall, CommandRegistry, CommandReply
from gateway.ownership import is_shared
from gateway.quotas import Admission, day_start
from gateway.store.usage import Spent, month_start

MAX_MEMBERS = 20  # lines of a chat's listing; the rest are counted


def _of(used: int, limit: int) -> str:
    return f"{used:,} of {limit:,}" if limit else f"{used:,} (no limit)"


def _seen_by_others(call: CommandCall) -> bool:
    """Whether others may read the answer: a shared chat's, but not a private chat with the
    bot (a Telegram chat whose id is the sender's, a Discord DM: no guild)."""
    origin = call.origin
    if not is_shared(call.session_id):
        return False
    if origin.platform == "telegram":
        return origin.channel_id != origin.sender_id
    if origin.platform == "discord":
        return bool(origin.guild_id)
    return True


def _cost_of(used: float, limit: int) -> str:
    return f"{money(used)} of {dollars(limit)}" if limit else f"{money(used)} (no limit)"


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
            # One's own spend is for oneself: shown to them alone where the front-end can.
            return CommandReply(call.name, await self.mine(call), private=True)
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
        today = await usage.spent(since_ms=day_start(now), identities=person.identities)
        month = await usage.spent(since_ms=month_start(now), identities=person.identities)
        owned = await admission.quotas.sessions_owned(person.identities)
        limits = person.limits
        lines = [
            f"tokens today: {_of(today.tokens, limits['tokens_day'])} (resets 00:00 UTC)",
            f"tokens this month: {_of(month.tokens, limits['tokens_month'])}",
        ]
        if admission.priced:
            lines += [
                f"spent today: {_cost_of(today.cost, limits['cost_day'])}",
                f"spent this month: {_cost_of(month.cost, limits['cost_month'])}",
            ]
        lines += [
            f"sessions owned: {_of(owned, limits['sessions'])}",
            f"messages a minute: {limits['messages_per_minute'] or 'no limit'}",
        ]
        # Which identities are one person is not for the rest of a shared chat to read.
        if len(person.identities) > 1 and not _seen_by_others(call):
            lines.append(f"counted together: {', '.join(sorted(person.identities))}")
        if person.exempt:
            lines.append("as a gateway admin, no quota applies to you")
        return "\n".join(lines)

    async def members(self, session_id: str) -> str:
        admission = self.admission
        now = admission.clock.now_ms()
        usage = admission.store.usage
        rows = await usage.by_identity(since_ms=month_start(now), session_id=session_id)
        today_rows = await usage.by_identity(since_ms=day_start(now), session_id=session_id)
        today = {r.identity: r.input + r.output for r in today_rows}
        limits = await admission.chat(session_id)
        chat_today = Spent(sum(today.values()), sum(r.cost or 0.0 for r in today_rows))
        chat_month = Spent(sum(r.input + r.output for r in rows), sum(r.cost or 0.0 for r in rows))
        head = (
            f"this chat today: {_of(chat_today.tokens, limits['tokens_day'])}; this month: "
            f"{_of(chat_month.tokens, limits['tokens_month'])}"
        )
        if admission.priced:
            head += (
                f"\nspent today: {_cost_of(chat_today.cost, limits['cost_day'])}; this month: "
                f"{_cost_of(chat_month.cost, limits['cost_month'])}"
            )
        lines = [head]
        for row in rows[:MAX_MEMBERS]:
            who = row.identity or "(before identities were kept)"
            cost = f" ({money(row.cost or 0.0)})" if admission.priced else ""
            lines.append(
                f"{who}: {today.get(row.identity, 0):,} today, "
                f"{row.input + row.output:,} this month{cost} in {row.calls:,} calls"
            )
        if len(rows) > MAX_MEMBERS:
            lines.append(f"… and {len(rows) - MAX_MEMBERS} more")
        return "\n".join(lines)
