"""Bindings: a place or a caller → a profile, and which binding answers a task.

A binding is `kind:key`. The most specific binding of a task wins, in this order:

1. `session:<session id>`: the profile a chat's admins chose with `/agent use NAME`;
2. Discord: `discord-thread:<id>` > `discord-channel:<id>` (a thread without a binding of its
   own follows its parent channel) > `discord-category:<id>` > `discord-role:<id>` (the
   sender's roles, highest first) > `discord-guild:<id>`;
   Telegram: `telegram-topic:<chat>:<topic>` > `telegram-chat:<chat>`;
3. `identity:<platform:id>`: who sends (an HTTP token's identity, a platform user);
4. `prefix:<cli|chat|temp|dc|tg>`: the session's kind;
5. the built-in `default` profile.

A role comes after the channel and category: a place bound to a profile answers everyone in it
the same way; a role picks the profile only where the place says nothing more specific than the
guild.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from gateway.events import Origin
from gateway.ids import InvalidSessionId, validate_session_id

KINDS: Final = (
    "session",
    "discord-thread",
    "discord-channel",
    "discord-category",
    "discord-role",
    "discord-guild",
    "telegram-topic",
    "telegram-chat",
    "identity",
    "prefix",
)
PREFIXES: Final = ("cli", "chat", "temp", "dc", "tg")
_SNOWFLAKE = re.compile(r"[0-9]{1,20}")
_CHAT = re.compile(r"-?[0-9]{1,20}")
_IDENTITY = re.compile(r"[a-z]{2,20}:[^\s:][^\s]{0,180}")


class BindingInvalid(ValueError):
    """A binding refused; the message names the part that is wrong."""


@dataclass(frozen=True, slots=True)
class Binding:
    kind: str
    key: str
    profile: str
    # Profiles a shared chat's admins may switch to here with `/agent use` (besides this one).
    switchable: tuple[str, ...] = ()
    bound_by: str = ""
    bound_at: int = 0

    @property
    def target(self) -> str:
        return f"{self.kind}:{self.key}"


def parse_target(target: str) -> tuple[str, str]:
    """`kind:key` checked: ("discord-channel", "901")."""
    kind, sep, key = target.strip().partition(":")
    if not sep or kind not in KINDS:
        raise BindingInvalid(f"target: expected KIND:KEY with KIND one of {', '.join(KINDS)}")
    _check_key(kind, key)
    return kind, key


def _check_key(kind: str, key: str) -> None:
    ok: bool
    if kind == "session":
        try:
            validate_session_id(key)
            ok = True
        except InvalidSessionId:
            ok = False
    elif kind.startswith("discord-"):
        ok = bool(_SNOWFLAKE.fullmatch(key))
    elif kind == "telegram-chat":
        ok = bool(_CHAT.fullmatch(key))
    elif kind == "telegram-topic":
        chat, sep, topic = key.partition(":")
        ok = bool(sep and _CHAT.fullmatch(chat) and _SNOWFLAKE.fullmatch(topic))
    elif kind == "identity":
        ok = bool(_IDENTITY.fullmatch(key))
    else:
        ok = key in PREFIXES
    if not ok:
        raise BindingInvalid(f"key: {key[:60]!r} is not a valid {kind} key")


def candidates(session_id: str, origin: Origin | None) -> list[tuple[str, str]]:
    """The bindings that could answer a task of `session_id` sent from `origin`, most
    specific first (see the module's order)."""
    found: list[tuple[str, str]] = [("session", session_id)]
    prefix, _, rest = session_id.partition("-")
    if prefix == "dc":
        found += _discord(rest, origin)
    elif prefix == "tg":
        found += _telegram(rest)
    if origin is not None and origin.sender_id:
        found.append(("identity", origin.sender_key))
    elif origin is not None and origin.acting_for:
        found.append(("identity", origin.acting_for))
    found.append(("prefix", prefix))
    return found


def _discord(channel: str, origin: Origin | None) -> list[tuple[str, str]]:
    if origin is None or origin.platform != "discord":
        # A schedule's or a subagent's task: the channel the session is, as far as it knows.
        return [("discord-thread", channel), ("discord-channel", channel)]
    found = [("discord-thread", channel)] if origin.parent_id else []
    found.append(("discord-channel", channel))
    if origin.parent_id:
        found.append(("discord-channel", origin.parent_id))
    if origin.category_id:
        found.append(("discord-category", origin.category_id))
    found += [("discord-role", role) for role in origin.role_ids]
    if origin.guild_id:
        found.append(("discord-guild", origin.guild_id))
    return found


def _telegram(rest: str) -> list[tuple[str, str]]:
    # tg-<chat> or tg-<chat>_<topic> (a forum topic is a session of its own).
    chat, _, topic = rest.partition("_")
    found = [("telegram-topic", f"{chat}:{topic}")] if topic else []
    found.append(("telegram-chat", chat))
    return found


def winner(
    bound: dict[tuple[str, str], Binding], session_id: str, origin: Origin | None
) -> Binding | None:
    """The most specific binding of the task; None: the `default` profile answers."""
    for candidate in candidates(session_id, origin):
        binding = bound.get(candidate)
        if binding is not None:
            return binding
    return None
