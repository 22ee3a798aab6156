"""/agent: which profile answers here and why (the binding that chose it), and, where the
operator allowed it, `/agent use NAME` for a shared chat's admins to switch among a set of
profiles. Gateway admins may choose any profile."""

from __future__ import annotations

from gateway.access import SessionAccess
from gateway.auth import Access, Authority
from gateway.commands.registry import Command, CommandCall, CommandRegistry, CommandReply
from gateway.profiles.bindings import BindingInvalid
from gateway.profiles.service import Profiles, Resolved, UnknownProfile
from gateway.profiles.spec import DEFAULT
from gateway.store.ownership import Ownership

USAGE = "usage: /agent, or /agent use NAME"


class AgentCommands:
    def __init__(
        self,
        registry: CommandRegistry,
        profiles: Profiles,
        authority: Authority,
        ownership: Ownership,
    ) -> None:
        self.registry = registry
        self.profiles = profiles
        # Gateway admins as everywhere else: the operator's terminal and API token, the
        # identities AGENVOY_ADMINS names, and those linked with one of them.
        self.access = SessionAccess(ownership, authority, open_gateway=_never)

    def register(self) -> None:
        self.registry.add(
            Command(
                "agent",
                "which agent profile answers here and why; `use NAME` switches (admins)",
                Access.shared_admin,
                self.agent,
                usage="[use NAME]",
                reads_without_args=True,
            )
        )

    async def agent(self, call: CommandCall) -> CommandReply:
        resolved = await self.profiles.resolve(call.session_id, call.origin)
        words = call.args.split()
        if not words:
            return CommandReply(call.name, _shown(resolved))
        if len(words) != 2 or words[0].lower() != "use":
            return CommandReply(call.name, USAGE, ok=False)
        return await self.use(call, resolved, words[1])

    async def use(self, call: CommandCall, resolved: Resolved, name: str) -> CommandReply:
        operator = (await self.access.caller(call.origin)).gateway_admin
        under = resolved.binding
        allowed = (*under.switchable, under.profile) if under is not None else ()
        if not operator and name not in allowed:
            said = ""
            if len(set(allowed)) > 1:
                said = f"; a chat's admins may choose: {', '.join(sorted(set(allowed)))}"
            refusal = f"only a gateway admin may choose {name!r} here{said}"
            return CommandReply(call.name, refusal, ok=False)
        try:
            await self.profiles.get(name)
            await self.profiles.choose(call.session_id, name, under, by=call.origin.sender_key)
        except (UnknownProfile, BindingInvalid) as exc:
            return CommandReply(call.name, str(exc), ok=False)
        return CommandReply(call.name, f"profile {name} answers here from the next message")


def _shown(resolved: Resolved) -> str:
    spec = resolved.spec
    version = f" (version {resolved.version})" if resolved.name != DEFAULT else ""
    what = " ".join(part for part in (spec.agent, spec.model) if part) or "as the environment says"
    lines = [f"profile: {resolved.name}{version}: {what}", f"why: {resolved.why}"]
    binding = resolved.binding
    if binding is not None and binding.switchable:
        choices = sorted({*binding.switchable, binding.profile})
        lines.append(f"admins may switch here: {', '.join(choices)} (/agent use NAME)")
    return "\n".join(lines)


async def _never() -> bool:
    return False
