"""What the API answers, as pydantic models, and the answers that are not JSON (event streams,
the metrics text). Handlers return these; the route table says which status each one gets, and
the OpenAPI document is generated from them.

Every field of an answer is always sent, defaults included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, RootModel
from typing_extensions import TypeAliasType

import gateway.engine as engine
from adapters.http.models import SessionId
from gateway import events
from gateway.engine import PromptKind
from gateway.store.actionlog import ActionRecord
from gateway.store.sessions import StoredMessage
from gateway.store.usage import ModelUsage as UsageRow

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

# Named, so that the document has one `Event` and one `TaskStatus` schema to refer to.
Event = TypeAliasType("Event", events.Event)
TaskStatus = TypeAliasType("TaskStatus", engine.TaskStatus)
UnixMs = TypeAliasType("UnixMs", Annotated[int, Field(description="Unix time in milliseconds")])
# Every listing's answer: where its next page starts (adapters/http/paging.py).
NextCursor = Annotated[
    str | None, Field(description="Pass as `cursor` for the next page; null on the last one.")
]


def json_reply(
    model: BaseModel, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=model.model_dump_json().encode(),
        status=status,
        headers=headers,
        content_type="application/json",
        charset="utf-8",
    )


class Reply(BaseModel):
    # Every field is always sent, so the document lists all of them as required.
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


@dataclass(frozen=True, slots=True)
class Media:
    """An answer that is not one JSON model: an event stream, or the metrics text."""

    content_type: str
    description: str
    frames: tuple[Any, ...] = ()  # the models a stream's frames carry, for the document


# -- errors ------------------------------------------------------------------------------------


class ErrorDetail(Reply):
    code: str = Field(examples=["bad_json", "bad_session_id", "not_found"])
    message: str


class Error(Reply):
    """An error: a machine-readable code and a message for people."""

    error: ErrorDetail


# -- tasks and prompts -------------------------------------------------------------------------


class Origin(Reply):
    platform: str
    channel_id: str
    reply_to: str
    sender_id: str
    sender_name: str
    is_admin: bool
    window_hash: str


class Prompt(Reply):
    """An open confirmation or question, and where it must be answered."""

    kind: PromptKind
    session_id: SessionId
    task_hash: str
    origin: Origin
    expires_at: UnixMs
    tool: str
    args: dict[str, Any]
    question: str
    options: list[str]

    @classmethod
    def of(cls, prompt: engine.Prompt) -> Prompt:
        return cls.model_validate(prompt.to_json())


class TaskView(Reply):
    """The task, and its events so far."""

    session_id: SessionId
    task_hash: str
    status: TaskStatus
    text: str
    error: str
    pending: Prompt | None
    events: list[Event]
    # With status "collected": the task that answers this message together with others.
    collected_into: str = ""

    @classmethod
    def of(cls, view: engine.TaskView) -> TaskView:
        return cls(
            session_id=view.session_id,
            task_hash=view.task_hash,
            status=view.status,
            text=view.reply,
            error=view.error,
            pending=Prompt.of(view.prompt) if view.prompt is not None else None,
            events=list(view.events),
            collected_into=view.collected_into,
        )


class SendFinished(Reply):
    """The task ended."""

    session_id: SessionId
    task_hash: str
    status: TaskStatus
    text: str
    error: str
    events: list[Event]
    # With status "collected": the task that answers this message together with others.
    collected_into: str = ""


class CommandResult(Reply):
    """The content was a gateway command, answered at once."""

    session_id: SessionId
    command: str
    ok: bool
    text: str


class SendPending(Reply):
    """The task waits for an answer to a confirmation or question."""

    session_id: SessionId
    task_hash: str
    status: TaskStatus
    pending: Prompt


class SendAccepted(Reply):
    """The task is still queued or running."""

    session_id: SessionId
    task_hash: str
    status: TaskStatus


class PendingList(Reply):
    """The open prompts, soonest to expire first."""

    pending: list[Prompt]
    next_cursor: NextCursor = None

    @classmethod
    def of(cls, prompts: list[engine.Prompt], next_cursor: str | None = None) -> PendingList:
        return cls(pending=[Prompt.of(p) for p in prompts], next_cursor=next_cursor)


class Approved(Reply):
    """The confirmation was answered."""

    answered: Literal[True] = True
    approved: bool | None
    by: str


class Answered(Reply):
    """The question was answered."""

    answered: Literal[True] = True
    answer: str | None
    by: str


class Canceled(Reply):
    """Whether the task was canceled (false: it had ended), and where it stood (README)."""

    canceled: bool
    was: Literal["running", "waiting_for_slot", "queued", "elsewhere"] | None


# -- sessions ----------------------------------------------------------------------------------


class CreatedSession(Reply):
    """The new session."""

    session_id: SessionId


class SessionSummary(Reply):
    session_id: SessionId
    name: str
    updated_at: UnixMs
    message_count: int
    running: bool
    parent: str = Field(
        "", description="For a subagent's temp-* session: the session whose task started it."
    )


class SessionList(Reply):
    """The sessions the caller may see, most recently active first, a page at a time."""

    sessions: list[SessionSummary]
    next_cursor: NextCursor = None


class SessionMeta(Reply):
    """The session's settings and state."""

    session_id: SessionId
    name: str
    persona: str
    model: str
    reasoning: str
    allowed_tools: list[str]
    created_at: UnixMs
    updated_at: UnixMs
    running: bool
    queued: int


class Deleted(Reply):
    """The session is gone."""

    deleted: Literal[True] = True


class Inputs(Reply):
    """Lines typed in the session's terminal windows, oldest first, at most 50."""

    inputs: list[str]


# -- the archive -------------------------------------------------------------------------------


class Message(Reply):
    id: int
    session_id: SessionId
    role: str
    content: str
    sender: str
    send_at: UnixMs
    task_hash: str

    @classmethod
    def of(cls, message: StoredMessage) -> Message:
        return cls.model_validate(asdict(message))


class Messages(Reply):
    """The messages, oldest first; `next_cursor` pages back to older ones."""

    messages: list[Message]
    next_cursor: NextCursor = None


class SearchResults(Reply):
    """The matches, newest first."""

    results: list[Message]
    next_cursor: NextCursor = None


class LogRecord(Reply):
    """One action.log record."""

    at: UnixMs
    window_hash: str
    kind: str
    task_hash: str
    body: str = Field(description="The event's own fields as JSON.")
    identity: str = Field("", description="Whom it happened for (`platform:sender id`) or empty.")

    @classmethod
    def of(cls, record: ActionRecord) -> LogRecord:
        return cls(
            at=(record.at - _EPOCH) // timedelta(milliseconds=1),
            window_hash=record.window_hash,
            kind=str(record.kind),
            task_hash=record.task_hash,
            body=record.body,
            identity=record.identity,
        )


class ModelUsage(Reply):
    model: str
    calls: int
    input: int
    output: int
    cache_read: int
    cache_write: int
    elapsed_ms: int
    output_tps: float
    cost: float | None = Field(
        None, description="US dollars by the price table (AGENVOY_PRICES); null: none priced"
    )

    @classmethod
    def of(cls, row: UsageRow) -> ModelUsage:
        return cls.model_validate(asdict(row))


class IdentityUsage(Reply):
    identity: str
    calls: int
    input: int
    output: int
    cost: float | None = Field(
        None, description="US dollars by the price table (AGENVOY_PRICES); null: none priced"
    )


class UsageList(Reply):
    """Token spend per model (of what the caller may see, with by=identity)."""

    models: list[ModelUsage]
    identities: list[IdentityUsage] | None = Field(None, description="with by=identity: a page")
    next_cursor: NextCursor = None


# -- operations --------------------------------------------------------------------------------


class CommandInfo(Reply):
    name: str
    summary: str
    usage: str = Field(description="what follows the name, e.g. <name>; empty for none")
    access: Literal["anyone", "requester", "shared_admin"] = Field(
        description="anyone; the requester of the task it acts on, or an admin; "
        "anyone in a private session, only admins in a shared chat"
    )


class CommandList(Reply):
    """The gateway commands the caller's front-end offers (send them as a message)."""

    commands: list[CommandInfo]


class OpenApiDocument(RootModel[dict[str, Any]]):
    """The OpenAPI 3.1 document."""


class Restarting(Reply):
    """The last frame of a stream a shutdown ends: what to ask for once the gateway is back."""

    session_id: SessionId
    task_hash: str | None = Field(description="The task a task stream followed; null for a log")
    retry_after: int = Field(description="Seconds to wait before asking again")
    resume: str = Field(description="The route to ask once the gateway is back")


TASK_STREAM: Final = Media(
    "text/event-stream",
    "The task's events until done, error or canceled, or a last `restarting` frame when the "
    "gateway shuts down first (framing: docs/events.md)",
    frames=(Event, Restarting),
)
LOG_STREAM: Final = Media(
    "text/event-stream",
    "`log` frames (a LogRecord each), the comment `: live`, then the session's live events; "
    "a last `restarting` frame when the gateway shuts down",
    frames=(LogRecord, Event, Restarting),
)
METRICS_TEXT: Final = Media(
    "text/plain", "Prometheus text exposition: gauges, counters and request durations"
)
