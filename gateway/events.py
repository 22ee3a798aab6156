"""The core's boundary: where a message came from, what came in, and what a task emits.

Adapters build `Inbound` values and render `Event` values; nothing else crosses between the
core and a platform. Events serialise to one JSON object each (the SSE wire format, documented
in docs/events.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from gateway.clock import now_ms

# Identities that stand for no one person: the shared API token, and a caller without one.
# Nothing is kept about them as about a member (no export, no erasure, no memories).
NOBODY = frozenset({"http:api", "http:anonymous"})


@dataclass(frozen=True, slots=True)
class Origin:
    """Who sent a message and where its answers must go."""

    platform: str  # "discord", "telegram", "http", "terminal"
    channel_id: str = ""  # the Discord channel / Telegram chat; empty for HTTP
    reply_to: str = ""  # the platform message to answer, if any
    sender_id: str = ""
    sender_name: str = ""
    is_admin: bool = False
    window_hash: str = ""  # the terminal window or HTTP client that started the run
    # The identity (`platform:sender id`) a message is sent on behalf of: a schedule's
    # creator. Limits, ownership and the audit count it as the sender.
    acting_for: str = ""
    # Where on Discord it was sent, for the profile bindings (gateway.profiles.bindings): the
    # guild, the channel a thread is in, the channel's category, and the sender's roles,
    # highest first. Empty elsewhere.
    guild_id: str = ""
    parent_id: str = ""
    category_id: str = ""
    role_ids: tuple[str, ...] = ()

    @property
    def sender_key(self) -> str:
        """`platform:sender id`, the form admins are listed in; whom the sender acts for
        when it acts for someone."""
        return self.acting_for or f"{self.platform}:{self.sender_id}"

    def to_json(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"acting_for": self.acting_for} if self.acting_for else {}
        for name in ("guild_id", "parent_id", "category_id"):
            if value := getattr(self, name):
                extra[name] = value
        if self.role_ids:
            extra["role_ids"] = list(self.role_ids)
        return {
            "platform": self.platform,
            "channel_id": self.channel_id,
            "reply_to": self.reply_to,
            "sender_id": self.sender_id,
            "sender_name": self.sender_name,
            "is_admin": self.is_admin,
            "window_hash": self.window_hash,
            **extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Origin:
        return cls(
            platform=str(data.get("platform", "")),
            channel_id=str(data.get("channel_id", "")),
            reply_to=str(data.get("reply_to", "")),
            sender_id=str(data.get("sender_id", "")),
            sender_name=str(data.get("sender_name", "")),
            is_admin=bool(data.get("is_admin", False)),
            window_hash=str(data.get("window_hash", "")),
            acting_for=str(data.get("acting_for", "")),
            guild_id=str(data.get("guild_id", "")),
            parent_id=str(data.get("parent_id", "")),
            category_id=str(data.get("category_id", "")),
            role_ids=tuple(str(r) for r in data.get("role_ids", ())),
        )


@dataclass(frozen=True, slots=True)
class Attachment:
    name: str
    mime: str = "application/octet-stream"
    size: int = 0
    path: str = ""  # where the adapter saved it, inside the session workspace


@dataclass(frozen=True, slots=True)
class Inbound:
    origin: Origin
    session_id: str
    text: str
    attachments: Sequence[Attachment] = field(default_factory=tuple)
    # The platform's id of what brought the message ("telegram:<bot>:<update id>"): a
    # delivery the platform repeats (after a crash, to another instance) is stored once.
    source_key: str = ""
    # With `source_key`: the fingerprint of what a client's request under an `Idempotency-Key`
    # asked for, kept with the key so that the key sent with another request is told apart.
    request_fingerprint: str = ""
    # The platform will not deliver the message again (Discord): while the archive is
    # unreachable the intake waits for it, in the session's turn, rather than refuse it.
    wait_for_store: bool = False
    # The sender was let in because the session did not exist: it is stored only if the
    # session is still theirs to make (another may have made the same new id meanwhile).
    claim: bool = False


# -- events -----------------------------------------------------------------------------------


class _EventBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: str
    task_hash: str = ""
    window_hash: str = ""
    at: int = Field(default_factory=now_ms)  # Unix ms


class UserEvent(_EventBase):
    kind: Literal["user"] = "user"
    text: str
    sender: str = ""


class TextDeltaEvent(_EventBase):
    kind: Literal["text_delta"] = "text_delta"
    text: str


class TextEvent(_EventBase):
    kind: Literal["text"] = "text"
    text: str


class ToolCallEvent(_EventBase):
    kind: Literal["tool_call"] = "tool_call"
    call_id: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class ToolResultEvent(_EventBase):
    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    tool: str
    status: Literal["ok", "error", "denied", "interrupted"] = "ok"
    result: str = ""


class ConfirmEvent(_EventBase):
    kind: Literal["confirm"] = "confirm"
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    requester: str = ""  # display name of who may answer (besides admins)
    expires_at: int = 0


class AskUserEvent(_EventBase):
    kind: Literal["ask_user"] = "ask_user"
    question: str
    options: list[str] = Field(default_factory=list)
    requester: str = ""
    expires_at: int = 0


class AnswerEvent(_EventBase):
    kind: Literal["answer"] = "answer"
    prompt: Literal["confirm", "ask_user"]
    approved: bool | None = None
    answer: str | None = None
    answered_by: str = ""  # display name, or "timeout"


class DoneEvent(_EventBase):
    kind: Literal["done"] = "done"
    text: str = ""  # the whole reply


class ErrorEvent(_EventBase):
    kind: Literal["error"] = "error"
    message: str


class CanceledEvent(_EventBase):
    kind: Literal["canceled"] = "canceled"
    by: str = ""


class NoticeEvent(_EventBase):
    """A line about the message rather than part of the conversation ("queued (2 ahead)",
    "collected 3 messages", a prompt that expired), for a client that reads the task's events
    (HTTP, the terminal); chat platforms get it as a message of its own."""

    kind: Literal["notice"] = "notice"
    text: str


Event = Annotated[
    UserEvent
    | TextDeltaEvent
    | TextEvent
    | ToolCallEvent
    | ToolResultEvent
    | ConfirmEvent
    | AskUserEvent
    | AnswerEvent
    | DoneEvent
    | ErrorEvent
    | CanceledEvent
    | NoticeEvent,
    Field(discriminator="kind"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def event_to_json(event: Event) -> str:
    return event.model_dump_json()


def event_from_json(data: str | bytes) -> Event:
    return EVENT_ADAPTER.validate_json(data)


def event_from_obj(data: object) -> Event:
    """An event from its JSON form already parsed (an outbox payload's `event`)."""
    return EVENT_ADAPTER.validate_python(data)
