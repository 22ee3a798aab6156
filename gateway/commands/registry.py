"""The command registry: every gateway command once, with who may run it.

`/help`, Telegram's command menu, Discord's application commands and the terminal's
completion are all read from here, so a command is described in one place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from gateway.auth import Access, Authority, NotAllowed
from gateway.events import Inbound, Origin
from gateway.ownership import Need


@dataclass(frozen=True, slots=True)
class Document:
    """A file a command's answer carries (a member's export). A front-end delivers it only
    where the one who asked alone sees it, and otherwise says where to get it."""

    name: str
    data: bytes
    media_type: str = "application/json"


@dataclass(frozen=True, slots=True)
class CommandReply:
    name: str
    text: str
    ok: bool = True
    session_id: str = ""  # set by /new: the session to switch to
    duplicate: bool = False  # delivered before: not run again, nothing to say
    # For the one who asked alone (a link code): a front-end that can show an answer to one
    # member of a chat (Discord's ephemeral responses) does so.
    private: bool = False
    document: Document | None = None


@dataclass(frozen=True, slots=True)
class CommandCall:
    """One use of a command: where, by whom, with what after the name."""

    name: str
    session_id: str
    origin: Origin
    args: str


Handler = Callable[[CommandCall], Awaitable[CommandReply]]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    summary: str  # one line, for /help and the platforms' command menus
    access: Access
    handler: Handler
    usage: str = ""  # what follows the name, e.g. "<name>"
    # Shown with no arguments, a shared-chat admin command only reads (`/model` alone shows the
    # model): anyone may do that.
    reads_without_args: bool = False
    platforms: frozenset[str] = frozenset()  # where it exists; empty = everywhere

    def available_on(self, platform: str) -> bool:
        return not self.platforms or platform in self.platforms


def parse_command(text: str) -> tuple[str, str] | None:
    """`/status@my_bot args` → ("status", "args"); None when the text is not a command."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2:
        return None
    head, _, rest = stripped[1:].partition(" ")
    # Telegram's menu takes no "-" in a name: `/forget-me` is typed, `forget_me` listed.
    name = head.split("@", 1)[0].lower().replace("-", "_")
    return name, rest.strip()


_ACCESS_NOTES = {
    Access.anyone: "",
    Access.requester: " (the one who started it, or an admin)",
    Access.shared_admin: " (admins only in shared chats)",
}


class CommandRegistry:
    def __init__(
        self,
        authority: Authority,
        first_delivery: Callable[[str, str], Awaitable[bool]] | None = None,
    ) -> None:
        """`first_delivery` records a delivery id (`Inbound.source_key`) and says whether it
        is new: a command a platform delivers twice (after a crash, to two instances) runs
        once. None: every delivery runs."""
        self.authority = authority
        self._commands: dict[str, Command] = {}
        self.first_delivery = first_delivery

    def add(self, command: Command) -> None:
        if command.name in self._commands:
            raise ValueError(f"command /{command.name} is registered twice")
        self._commands[command.name] = command

    def get(self, name: str) -> Command | None:
        return self._commands.get(name)

    def __iter__(self) -> Iterator[Command]:
        return iter(self._commands.values())

    def menu(self, platform: str) -> list[Command]:
        """The commands a platform lists in its own command menu."""
        return [c for c in self if c.available_on(platform)]

    def help_text(self) -> str:
        lines = ["Commands:"]
        for command in self:
            head = f"/{command.name} {command.usage}".rstrip()
            where = ""
            if command.platforms:
                where = f" ({', '.join(sorted(command.platforms))} only)"
            lines.append(f"{head:<17} {command.summary}{_ACCESS_NOTES[command.access]}{where}")
        lines.append("Anything else is a message for the agent.")
        return "\n".join(lines)

    def need_of(self, text: str) -> Need:
        """What sending `text` asks of a private session (gateway/ownership.py): a command that
        changes it (settings, tools, reset, schedules) asks `configure`, anything else `write`.
        In a shared chat the command checks its own admins, whom the platform vouches for."""
        parsed = parse_command(text)
        command = self._commands.get(parsed[0]) if parsed else None
        if command is None or command.access is not Access.shared_admin:
            return Need.write
        if parsed and command.reads_without_args and not parsed[1]:
            return Need.write
        return Need.configure

    def takes(self, text: str) -> bool:
        """Whether `run` answers `text` as a command rather than leave it to the agent."""
        parsed = parse_command(text)
        return parsed is not None and parsed[0] in self._commands

    async def run(self, inbound: Inbound) -> CommandReply | None:
        """The reply to a command; None when the text is no command (it goes to the agent)."""
        parsed = parse_command(inbound.text)
        if parsed is None:
            return None
        name, args = parsed
        command = self._commands.get(name)
        if command is None:
            return None  # an unknown /word is a message for the agent
        origin = inbound.origin
        if not command.available_on(origin.platform):
            where = ", ".join(sorted(command.platforms))
            return CommandReply(name, f"/{name} is available in the {where} only", ok=False)
        once = self.first_delivery
        if inbound.source_key and once and not await once(inbound.source_key, inbound.session_id):
            return CommandReply(name, "", duplicate=True)
        call = CommandCall(name, inbound.session_id, origin, args)
        try:
            self._check(command, call)
            return await command.handler(call)
        except NotAllowed as refused:
            return CommandReply(name, str(refused), ok=False)

    def _check(self, command: Command, call: CommandCall) -> None:
        if command.access is not Access.shared_admin:
            return  # `requester` commands check against the task they act on
        if command.reads_without_args and not call.args:
            return
        if not self.authority.may_configure(call.origin, call.session_id):
            raise NotAllowed(f"only an admin may use /{command.name} in a shared chat")
