"""Who may read and change a session: the one rule every front-end asks (the HTTP API, the
console, MCP), applied where data is read and written (`gateway/access.py` gathers the facts
from the store and asks here).

- A **gateway admin** (named by the operator in `AGENVOY_ADMINS`, the local terminal user, and
  on a gateway that requires no token, whoever reaches it) may do everything.
- A **private session** (`cli-*`, `chat-*`, `temp-*`) belongs to the identity that made it and
  to every identity linked with it. Its owner may do everything with it; an identity it is
  shared with may read it (`read`) or read it and write in it (`write`); nobody else sees it.
  A private session made before owners were kept has none: only gateway admins reach it.
- A **shared chat** (`dc-*`, `tg-*`) is read and written by the members of that channel or
  chat. The platform decides membership: in the chat itself whoever writes there is one; over
  the API, the console and MCP, an identity linked with one that has written there. What
  changes the chat for everyone (settings, reset, delete, schedules) is for the chat's admins,
  as the platform vouches for them in that chat, and gateway admins.

The rule is a pure function of a `Caller` and the `SessionFacts`, so that one table-driven
test can hold every answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gateway.events import Origin
from gateway.ids import Prefix, prefix_of

SHARED_PREFIXES = frozenset({Prefix.dc, Prefix.tg})


class Need(StrEnum):
    """What a caller wants to do with a session, from least to most."""

    read = "read"  # its messages, history, search hits, streams, files, the console's page
    write = "write"  # send a message in it, answer and cancel one's own tasks there
    configure = "configure"  # rename it, change its persona, model, reasoning or tools
    manage = "manage"  # reset, delete, share it, schedule prompts in it


class ShareMode(StrEnum):
    read = "read"
    write = "write"


_SHARE_GRANTS: dict[ShareMode, frozenset[Need]] = {
    ShareMode.read: frozenset({Need.read}),
    ShareMode.write: frozenset({Need.read, Need.write}),
}


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking, as their credential or platform says."""

    key: str  # the identity key, `platform:sender id`
    identities: frozenset[str]  # every identity linked with it, itself included
    gateway_admin: bool = False
    # The platform vouched for the caller as an admin of `chat`, the chat it writes from.
    chat: str = ""
    chat_admin: bool = False


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """What the rule needs to know of one session, for one caller."""

    session_id: str
    owner: str = ""  # the identity that made it; "" for a shared chat or an old session
    shares: Mapping[str, ShareMode] = field(default_factory=dict)  # identity → mode
    # One of the caller's identities has written in this shared chat.
    member: bool = False


def is_shared(session_id: str) -> bool:
    return prefix_of(session_id) in SHARED_PREFIXES


def owner_for(session_id: str, maker: Origin) -> str:
    """Who owns a session `maker` makes: them, for a private one; nobody for a shared chat."""
    return "" if is_shared(session_id) else maker.sender_key


def allows(caller: Caller, need: Need, facts: SessionFacts) -> bool:
    """May `caller` do `need` with the session `facts` describe?"""
    if caller.gateway_admin:
        return True
    if is_shared(facts.session_id):
        in_chat = caller.chat == facts.session_id
        if need in (Need.read, Need.write):
            return in_chat or facts.member
        return in_chat and caller.chat_admin
    if facts.owner and facts.owner in caller.identities:
        return True
    granted: frozenset[Need] = frozenset()
    for identity in caller.identities:
        mode = facts.shares.get(identity)
        if mode is not None:
            granted |= _SHARE_GRANTS[mode]
    return need in granted


def refusal(need: Need, session_id: str) -> str:
    """What a caller who may read a session but not `need` it is told."""
    if is_shared(session_id):
        return f"only an admin of this chat may {need.value} it"
    if need is Need.write:
        return "this session is shared with you read-only"
    return f"only the owner of this session may {need.value} it"
