"""Session access for the front-ends that reach sessions by id (the HTTP API, the console,
MCP): who the caller is, what the store knows of the session, and the rule of
`gateway/ownership.py` between them.

A caller that may not read a session is told it does not exist, as for a session that does
not: which sessions others have is none of their business. One that may read it but not do
what it asked is told why (`NotAllowed`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.auth import Authority, NotAllowed
from gateway.events import Origin
from gateway.ownership import Caller, Need, SessionFacts, allows, is_shared, owner_for, refusal
from gateway.store.base import SessionTaken, UnknownSession
from gateway.store.ownership import EVERYTHING, Ownership, Visibility
from gateway.store.quotas import read_ahead
from gateway.store.session_facts import CallerRead

# Identities that are the gateway's operator by the credential they hold: the local
# terminal credential (whoever can read the home) and the shared API token.
OPERATOR_KEYS = frozenset({"http:api"})
OPERATOR_PLATFORMS = frozenset({"terminal"})
ANONYMOUS_KEY = "http:anonymous"

T = TypeVar("T")


class SessionAccess:
    def __init__(
        self,
        ownership: Ownership,
        authority: Authority,
        *,
        open_gateway: Callable[[], Awaitable[bool]],
    ) -> None:
        self._ownership = ownership
        self._authority = authority
        # Whether callers need no token at all: then whoever reaches the gateway (on loopback,
        # unless the operator bound it wider on purpose) is its operator.
        self._open_gateway = open_gateway

    async def is_gateway_admin(self, who: Origin) -> bool:
        if who.platform in OPERATOR_PLATFORMS or who.sender_key in OPERATOR_KEYS:
            return True
        if who.sender_key in self._authority.admins:
            return True
        return who.sender_key == ANONYMOUS_KEY and await self._open_gateway()

    async def caller(self, who: Origin) -> Caller:
        return await self._caller(who, await self._ownership.linked(who.sender_key))

    async def _caller(self, who: Origin, linked: frozenset[str]) -> Caller:
        admin = await self.is_gateway_admin(who) or bool(linked & self._authority.admins)
        # Whom a platform vouches for as a chat's admin is known in that chat only (its
        # commands); here, reached by id, such a caller is one of its members.
        return Caller(who.sender_key, linked, gateway_admin=admin)

    async def _caller_facts(
        self, who: Origin, session_id: str
    ) -> tuple[Caller, SessionFacts | None]:
        """The caller and the session's facts, in one read of the archive."""
        caller, read = await self._caller_read(who, session_id)
        return caller, read.facts

    async def _caller_read(self, who: Origin, session_id: str) -> tuple[Caller, CallerRead]:
        read = await self._ownership.caller_facts(who.sender_key, session_id)
        return await self._caller(who, read.identities), read

    async def may(self, who: Origin, session_id: str, need: Need) -> bool:
        """May `who` do `need` with the session? False for a session that does not exist."""
        caller, facts = await self._caller_facts(who, session_id)
        return facts is not None and allows(caller, need, facts)

    async def require(self, who: Origin, session_id: str, need: Need) -> None:
        """Raise `UnknownSession` unless `who` may read the session, `NotAllowed` unless they
        may also do `need`."""
        caller, facts = await self._caller_facts(who, session_id)
        if facts is None or not allows(caller, Need.read, facts):
            raise UnknownSession(session_id)
        if need is not Need.read and not allows(caller, need, facts):
            raise NotAllowed(refusal(need, session_id))

    async def require_send(self, who: Origin, session_id: str, need: Need = Need.write) -> bool:
        """`require(need)` (`write`, or `configure` for a command that changes a private
        session: `message_need`) for a session that exists. One that does not is made by the
        message, owned by `who` when it is private; a shared chat is made by its platform
        (or a gateway admin). True when the session does not exist yet: the message is then
        to be stored only if its session is still `who`'s to make (`claim`, `SessionTaken`)."""
        return (await self._require_send(who, session_id, need))[0]

    async def _require_send(
        self, who: Origin, session_id: str, need: Need
    ) -> tuple[bool, CallerRead]:
        caller, read = await self._caller_read(who, session_id)
        facts = read.facts
        if facts is None:
            if is_shared(session_id) and not caller.gateway_admin:
                raise UnknownSession(session_id)
            return True, read
        if not allows(caller, Need.read, facts):
            raise UnknownSession(session_id)
        need = self.message_need(session_id, need)
        if not allows(caller, need, facts):
            raise NotAllowed(refusal(need, session_id))
        return False, read

    @staticmethod
    def message_need(session_id: str, need: Need) -> Need:
        """What a message asking `need` is held to: in a shared chat `write`, since its
        commands check the chat's admins themselves."""
        return Need.write if is_shared(session_id) else need

    async def sending(
        self,
        who: Origin,
        session_id: str,
        send: Callable[[bool], Awaitable[T]],
        need: Need = Need.write,
    ) -> T:
        """`send(claim)` once `who` may send to the session (`require_send`). Two callers
        may both find a new id free: the store lets one make it, and the other, told
        `SessionTaken`, is asked the rule again — refused, unless the maker let them in.
        The message's admission takes the caller's quotas from the rule's read."""
        new, read = await self._require_send(who, session_id, need)
        try:
            with read_ahead(who.sender_key, read):
                return await send(new)
        except SessionTaken:
            if not new:
                raise
        _, read = await self._require_send(who, session_id, need)
        with read_ahead(who.sender_key, read):
            return await send(False)

    async def visibility(self, who: Origin) -> Visibility:
        """What of the listings and searches `who` may see."""
        caller = await self.caller(who)
        return EVERYTHING if caller.gateway_admin else Visibility(False, caller.identities)

    @staticmethod
    def owner_for(session_id: str, maker: Origin) -> str:
        return owner_for(session_id, maker)
