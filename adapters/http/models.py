"""What comes in over HTTP, as pydantic models: request bodies, query strings, the identity
headers and the path parameters. The answers are in `replies.py`; the OpenAPI document is
generated from both, so a field changed here changes the document too.

Request bodies are strict (a number is not a string, `1` is not `true`) and refuse unknown
fields; a `null` field counts as absent. No text anywhere may hold a NUL or a lone surrogate
(400 `bad_text`): neither can be stored, so they are refused before anything is. Query strings
and headers are text, so their models convert ("10" becomes 10); unknown query parameters are
ignored.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from adapters.http.paging import IdCursor, NameCursor, PromptCursor, limit_field
from gateway.ids import HASH_RE, SESSION_ID_RE, Prefix, validate_hash
from gateway.session_settings import (
    MAX_ALLOWED_TOOLS,
    MAX_NAME_CHARS,
    REASONING_LEVELS,
    TOOL_NAME,
)
from gateway.store.search import MAX_PAGE

MAX_WAIT_SECONDS: Final = 300.0
MAX_UPLOADS: Final = 8
# A request body is at most 1 MiB (`app.MAX_BODY_BYTES`), which bounds a file's size already.
MAX_UPLOAD_BYTES: Final = 1024 * 1024
HISTORY_DEFAULT: Final = 50
HISTORY_MAX: Final = 500
LOG_TAIL_DEFAULT: Final = 100
LOG_TAIL_MAX: Final = 1000
SEARCH_DEFAULT: Final = 20
# `platform:sender id`, as identities are named everywhere (`http:ann`, `telegram:1234`).
IDENTITY_PATTERN: Final = r"^[a-z]{2,16}:[A-Za-z0-9_.@-]{1,180}$"
SESSIONS_DEFAULT: Final = 100
SESSIONS_MAX: Final = 500
# A page's end: the last session's activity time and id (`1733385600000~chat-ab12`).
# Empty is allowed in the document as everywhere: a blank parameter is read as an absent one.
SESSION_CURSOR_PATTERN: Final = r"^([0-9]{1,19}~(cli|chat|dc|tg|temp)-[A-Za-z0-9_-]{1,128})?$"
SEARCH_MAX_OFFSET: Final = 10_000
USAGE_DEFAULT_DAYS: Final = 28
USAGE_IDENTITIES_DEFAULT: Final = 100
USAGE_IDENTITIES_MAX: Final = 500
PENDING_DEFAULT: Final = 50
PENDING_MAX: Final = 200
USAGE_MAX_DAYS: Final = 3650

WINDOW_HEADER: Final = "X-Agenvoy-Window"
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
# The platforms of the callers the API knows (gateway/credentials.py): terminal windows and
# the `agenvoy` commands, and everyone else.
ClientPlatform = Literal["http", "terminal"]
# The router pushes nothing to these: their clients read events from the gateway.
CLIENT_PLATFORMS: Final = frozenset(get_args(ClientPlatform))

SessionId = Annotated[
    str,
    # Only documented here: gateway.ids checks it, so that a bad id answers `bad_session_id`
    # wherever it comes from.
    Field(
        json_schema_extra={"pattern": f"^{SESSION_ID_RE.pattern}$"},
        examples=["cli-3f2a9c1e-0d4b-4e59-9a57-6f1b0c8d2e11"],
    ),
]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _storable(value: Any) -> Any:
    """Refuses text that holds a NUL or a lone surrogate, in a field or in a list of them."""
    for text in value if isinstance(value, list) else (value,):
        if not isinstance(text, str):
            continue
        if "\x00" in text:
            raise PydanticCustomError("bad_text", "holds a NUL character")
        try:
            text.encode("utf-8")  # in C: a scan in Python cost ~50 µs per kilobyte of text
        except UnicodeEncodeError:
            raise PydanticCustomError("bad_text", "holds a lone surrogate") from None
    return value


def _window_hash(value: str) -> str:
    return validate_hash(value, "window hash")


NonBlank = Annotated[str, Field(min_length=1), AfterValidator(_not_blank)]
WaitSeconds = Annotated[
    float,
    Field(
        ge=0,
        le=MAX_WAIT_SECONDS,
        allow_inf_nan=False,
        description="Seconds to wait for the task to end or ask something.",
    ),
]


# -- bodies ------------------------------------------------------------------------------------


def _null_allowed(schema: dict[str, Any]) -> None:
    """In the document: every optional field may be null, as the models read it."""
    required = set(schema.get("required", ()))
    properties: dict[str, Any] = schema.get("properties", {})
    for name, field in properties.items():
        if name in required or {"type": "null"} in field.get("anyOf", ()):
            continue
        outer = {k: field.pop(k) for k in ("title", "description", "default") if k in field}
        properties[name] = {"anyOf": [field, {"type": "null"}], **outer}


def _exactly_one_answer(schema: dict[str, Any]) -> None:
    _null_allowed(schema)
    properties = schema["properties"]
    schema["oneOf"] = [
        {"required": [name], "properties": {name: properties[name]["anyOf"][0]}}
        for name in ("approve", "answer")
    ]


class RequestBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", json_schema_extra=_null_allowed)

    _storable = field_validator("*", mode="after")(_storable)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            # Only for known fields: an unknown one is refused even when null.
            known = cls.model_fields
            return {k: v for k, v in data.items() if v is not None or k not in known}
        return data


class CreateSessionRequest(RequestBody):
    prefix: Literal["cli", "chat"] = "cli"
    name: str = Field("", max_length=MAX_NAME_CHARS, description="The session's name.")

    @field_validator("prefix", mode="before")
    @classmethod
    def _empty_is_default(cls, value: Any) -> Any:
        return "cli" if value == "" else value


BASE64_PATTERN: Final = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _base64(value: str) -> str:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise PydanticCustomError("bad_base64", "is not base64") from None
    return value


class Upload(RequestBody):
    """A file that comes with a message; saved in the session's `workspace/attachments/`."""

    name: Annotated[NonBlank, Field(max_length=MAX_NAME_CHARS)]
    mime: str = Field(
        "application/octet-stream", max_length=100, pattern=r"^[A-Za-z0-9.+-]+/[A-Za-z0-9.+-]+$"
    )
    data: Annotated[
        str,
        Field(
            description="The file's bytes, base64 (the whole body is at most 1 MiB).",
            # Only documented here: `_base64` checks it, with a message that says what is wrong.
            json_schema_extra={"pattern": BASE64_PATTERN},
        ),
        AfterValidator(_base64),
    ]


class SendRequest(RequestBody):
    content: NonBlank
    attachments: list[Upload] = Field(
        default_factory=list,
        max_length=MAX_UPLOADS,
        description="Files for the agent: images are shown to vision models, audio transcribed.",
    )
    session_id: SessionId | None = None
    persist: bool = Field(
        False, description="Without session_id: a new chat-* session instead of temp-*."
    )
    stream: bool = Field(False, description="Answer with the task's events as text/event-stream.")
    wait: WaitSeconds = MAX_WAIT_SECONDS


class UpdateSessionRequest(RequestBody):
    """The fields to change; an empty string restores the default."""

    name: str | None = Field(None, max_length=MAX_NAME_CHARS)
    persona: str | None = None
    model: str | None = Field(None, max_length=MAX_NAME_CHARS)
    reasoning: str | None = Field(
        None,
        description=f"One of {', '.join(REASONING_LEVELS)}, or empty for the model's default.",
    )
    allowed_tools: list[Annotated[str, Field(pattern=f"^{TOOL_NAME.pattern}$")]] | None = Field(
        None,
        max_length=MAX_ALLOWED_TOOLS,
        description="Tools that run without asking for confirmation.",
    )


class AddInputRequest(RequestBody):
    entry: NonBlank


class AnswerRequest(RequestBody):
    """`approve` answers a confirmation, `answer` a question: exactly one of them."""

    model_config = ConfigDict(json_schema_extra=_exactly_one_answer)

    approve: bool | None = None
    answer: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> AnswerRequest:
        if (self.approve is None) == (self.answer is None):
            raise ValueError("send either 'approve' (a confirmation) or 'answer' (a question)")
        return self


# -- query strings -----------------------------------------------------------------------------


class Query(BaseModel):
    model_config = ConfigDict(extra="ignore")

    _storable = field_validator("*", mode="after")(_storable)


class SessionsQuery(Query):
    prefix: Prefix | None = Field(None, description="Only sessions with this prefix.")
    limit: int = Field(SESSIONS_DEFAULT, ge=1, le=SESSIONS_MAX, description="Page size.")
    cursor: str | None = Field(
        None,
        max_length=200,
        pattern=SESSION_CURSOR_PATTERN,
        description="Where the page starts: the `next_cursor` of the page before.",
    )


class HistoryQuery(Query):
    limit: int = limit_field(HISTORY_DEFAULT, HISTORY_MAX)
    cursor: IdCursor | None = None


class PendingQuery(Query):
    limit: int = limit_field(PENDING_DEFAULT, PENDING_MAX)
    cursor: PromptCursor | None = None


class LogQuery(Query):
    tail: int = Field(
        LOG_TAIL_DEFAULT,
        ge=0,
        le=LOG_TAIL_MAX,
        description="How many action.log records to replay first.",
    )


class TaskQuery(Query):
    wait: WaitSeconds | None = None


class SearchQuery(Query):
    q: str = Field(
        min_length=1,
        description="Search terms (a parameter of only spaces and tabs counts as absent).",
        # Only documented: `_storable` refuses a NUL with its own code (bad_text), and a blank
        # parameter is read as a missing one (inputs.py).
        json_schema_extra={"pattern": "^[^\u0000]*[^\u0000 \t][^\u0000]*$"},
    )
    session_id: SessionId | None = Field(None, description="Only this session.")
    limit: int = limit_field(SEARCH_DEFAULT, MAX_PAGE)
    cursor: IdCursor | None = None
    offset: int = Field(
        0,
        ge=0,
        le=SEARCH_MAX_OFFSET,
        description="Results to skip (deprecated: pages shift as messages arrive; use cursor, "
        "which it cannot be combined with).",
    )
    mode: Literal["fulltext", "semantic"] = Field(
        "fulltext",
        description="fulltext: messages containing every term, newest first; semantic: the "
        "messages (and summaries) closest in meaning to q, best first, one page of `limit` "
        "(neither offset nor cursor applies), of session_id or, without it, of the sessions "
        "the caller may read that have embeddings (the most recently active, up to a cap: "
        "the reply says how many were searched and whether some were left out).",
    )


class UsageQuery(Query):
    days: int = Field(
        USAGE_DEFAULT_DAYS, ge=1, le=USAGE_MAX_DAYS, description="How many days back."
    )
    by: Literal["model", "identity"] = Field(
        "model",
        description="identity: spend per member too (gateway admins see everyone, others "
        "themselves and the identities linked with them), a page of them by identity",
    )
    limit: int = limit_field(USAGE_IDENTITIES_DEFAULT, USAGE_IDENTITIES_MAX)
    cursor: NameCursor | None = None  # by=identity only: the models are answered at once


# -- headers and path --------------------------------------------------------------------------


class Caller(BaseModel):
    """What a caller may say about itself besides its credential: see identity.py."""

    model_config = ConfigDict(extra="ignore")

    window: Annotated[str, AfterValidator(_window_hash)] | None = Field(
        None,
        alias=WINDOW_HEADER,
        description=(
            "A label an HTTP client puts on its tasks' events (minted per request when absent); "
            "it grants nothing. A terminal window's hash comes with its credential instead."
        ),
        json_schema_extra={"pattern": f"^{HASH_RE.pattern}$"},
    )


class Idempotency(BaseModel):
    """A key that makes a request safe to send again (adapters/http/idempotency.py)."""

    model_config = ConfigDict(extra="ignore")

    key: str | None = Field(
        None,
        alias=IDEMPOTENCY_HEADER,
        min_length=1,
        max_length=255,
        pattern=r"^[\x20-\x7e]+$",
        description=(
            "Any printable ASCII, unique per request (a UUID): sent again with the same request "
            "within 24 hours, the first request's result is answered and nothing is done "
            "twice; with another request, 422 idempotency_mismatch. Keys are the caller's own."
        ),
    )


class PathParameters(BaseModel):
    """The named parts of the paths, for the document; the handlers check them."""

    sid: SessionId
    task_hash: str
    schedule_id: int = Field(ge=1, description="A schedule's number, as its session lists it.")
    identity: str = Field(
        pattern=IDENTITY_PATTERN,
        description="An identity: platform:sender id (http:ann, telegram:1234).",
    )
    profile: str = Field(
        pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$",
        description="An agent profile's name; `default` is the environment's configuration.",
    )
    subject: str = Field(
        pattern=r"^([a-z]{2,16}:[A-Za-z0-9_.@-]{1,180}|(dc|tg)-[A-Za-z0-9_-]{1,128})$",
        description="Whose limits: an identity (`http:ann`) or a shared chat (`tg-…`, `dc-…`).",
    )
    change: int = Field(ge=1, description="A configuration change's number (`/v1/changes`).")
    document: int = Field(ge=1, description="An attached document's number (`/v1/knowledge`).")
    platform: str = Field(pattern=r"^(telegram|discord)$", description="A chat platform.")
    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="A token's name: it stands for http:NAME."
    )
