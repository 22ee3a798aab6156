"""SQL tables of the archive. The schema itself is owned by the migrations; these classes
mirror it for queries, and a test checks that the two agree."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import BigInteger, Column, Double, LargeBinary, Table, Text
from sqlmodel import Field, SQLModel


class SettingsView:
    """What a session's settings columns mean; shared by the table row and the lean read of
    them (`SessionSettings`)."""

    role: str
    rule: str
    settings: str

    @property
    def persona(self) -> str:
        return self.role or self.rule

    @property
    def options(self) -> dict[str, Any]:
        """`settings` decoded; a damaged value reads as no settings rather than failing a run."""
        try:
            value = json.loads(self.settings or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @property
    def queue_mode(self) -> str:
        """What a message arriving during a run does here (`/queue`); "followup" by default."""
        mode = self.options.get("queue_mode", "")
        return mode if isinstance(mode, str) and mode else "followup"

    @property
    def parent(self) -> tuple[str, str] | None:
        """(session, task) that started this subagent session, if it is one."""
        link = self.options.get("parent")
        if isinstance(link, dict):
            session, task = link.get("session"), link.get("task")
            if isinstance(session, str) and isinstance(task, str):
                return session, task
        return None

    @property
    def allowed_tools(self) -> frozenset[str]:
        """Tools that run without asking for confirmation in this session (`/allow <tool>`)."""
        tools = self.options.get("allowed_tools", [])
        return (
            frozenset(t for t in tools if isinstance(t, str))
            if isinstance(tools, list)
            else frozenset()
        )


@dataclass(frozen=True, slots=True)
class SessionSettings(SettingsView):
    """The settings columns of a session's row, as a task's context reads them."""

    role: str
    rule: str
    model: str
    reasoning: str
    settings: str


class SessionRow(SettingsView, SQLModel, table=True):
    __tablename__ = "session"

    id: str = Field(primary_key=True, max_length=140)
    name: str = ""
    # Unique when non-empty (a partial index): the platform-side identity of the session.
    self_id: str = ""
    # The persona. Written to both `role` and the legacy `rule`; read from `role` first.
    role: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    rule: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    model: str = ""
    reasoning: str = ""
    # JSON object of per-session settings (tool allow-list and the like).
    settings: str = Field(default="{}", sa_column=Column(Text, nullable=False, server_default="{}"))
    created_at: int = Field(default=0, sa_type=BigInteger)  # Unix ms
    updated_at: int = Field(default=0, sa_type=BigInteger)  # Unix ms, last activity
    # The identity key that made a private session; "" for a shared chat (gateway/ownership.py).
    owner: str = Field(default="", max_length=200)


class MessageRow(SQLModel, table=True):
    __tablename__ = "messages"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(max_length=140)
    role: str
    content: str = Field(sa_column=Column(Text, nullable=False))
    sender: str = ""
    send_at: int = Field(sa_type=BigInteger)  # Unix ms
    task_hash: str = ""
    # What brought the message in, as the platform names it ("telegram:<bot>:<update id>");
    # unique when not empty, so a delivery the platform repeats is stored once.
    source_key: str = Field(default="", max_length=200)
    # Who wrote it (`platform:sender id`); "" for the agent's own messages.
    sender_key: str = Field(default="", max_length=200)


class ActionHistoryRow(SQLModel, table=True):
    __tablename__ = "action_history"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(max_length=140)
    task_hash: str
    objective: str = Field(default="", sa_column=Column(Text, nullable=False))
    tool_results: str = Field(default="[]", sa_column=Column(Text, nullable=False))  # JSON list
    reply: str = Field(default="", sa_column=Column(Text, nullable=False))
    # Whom the task acted for (`platform:sender id`); "" for runs from before it was kept.
    identity: str = Field(default="", max_length=200)
    created_at: int = Field(default=0, sa_type=BigInteger)


class FileHistoryRow(SQLModel, table=True):
    __tablename__ = "file_history"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(max_length=140)
    task_id: str = ""
    dir: str
    name: str
    content: str = Field(default="", sa_column=Column(Text, nullable=False))
    created_at: int = Field(default=0, sa_type=BigInteger)


class UsageRow(SQLModel, table=True):
    __tablename__ = "usage"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(max_length=140)
    model: str
    input: int = Field(default=0, sa_type=BigInteger)
    output: int = Field(default=0, sa_type=BigInteger)
    cache_read: int = Field(default=0, sa_type=BigInteger)
    cache_write: int = Field(default=0, sa_type=BigInteger)
    elapsed_ms: int = Field(default=0, sa_type=BigInteger)
    tool_calls: str = "[]"  # JSON list of the tool-call ids in that reply
    send_at: int = Field(default=0, sa_type=BigInteger)
    # The task the call was made for: a subagent's name the parent task that started it.
    task_hash: str = Field(default="", max_length=32)
    identity: str = Field(default="", max_length=200)  # whom it was spent for
    # US dollars by the price table of the time it was written; None: no price table then.
    cost: float | None = Field(default=None, sa_type=Double)


class OutboxRow(SQLModel, table=True):
    __tablename__ = "outbox"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(max_length=140)
    task_hash: str = Field(max_length=64)
    chunk_index: int
    content_hash: str = Field(max_length=64)
    kind: str = Field(max_length=32)
    platform: str = Field(max_length=32)
    payload: str = Field(sa_column=Column(Text, nullable=False))
    status: str = "pending"  # pending | delivered | failed
    platform_message_id: str = ""
    attempts: int = 0
    parts_sent: int = 0  # parts of a split message already accepted by the platform
    parts_attempted: int = 0  # parts handed to the platform (one more: it may have it)
    last_error: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    created_at: int = Field(default=0, sa_type=BigInteger)
    delivered_at: int = Field(default=0, sa_type=BigInteger)
    # The instance sending this entry, until when (several instances: each entry sent once).
    claimed_by: str = Field(default="", max_length=140)
    claimed_until: int = Field(default=0, sa_type=BigInteger)
    # After a failed attempt: when the next one is due, and when the entry stops being tried
    # (ms; 0 until its first failure). Kept here so a restart goes on with the same backoff.
    next_attempt_at: int = Field(default=0, sa_type=BigInteger)
    expires_at: int = Field(default=0, sa_type=BigInteger)


class TaskJournalRow(SQLModel, table=True):
    """An unfinished task: what a restart needs to take it up again (engine.journal)."""

    __tablename__ = "task_journal"

    task_hash: str = Field(primary_key=True, max_length=64)
    session_id: str = Field(max_length=140)
    origin: str = Field(sa_column=Column(Text, nullable=False))  # JSON
    text: str = Field(sa_column=Column(Text, nullable=False))
    user_message_id: int = Field(sa_type=BigInteger)
    user_sent_at: int = Field(default=0, sa_type=BigInteger)
    submitted_at: int = Field(default=0, sa_type=BigInteger)
    status: str = Field(default="queued", max_length=16)
    steps: str = Field(default="[]", sa_column=Column(Text, nullable=False))  # JSON list
    prompt: str = Field(default="", sa_column=Column(Text, nullable=False))  # JSON, "" for none
    updated_at: int = Field(default=0, sa_type=BigInteger)


class PromptAnswerRow(SQLModel, table=True):
    """The answer to a task's n-th prompt: the first one given, on whichever instance."""

    __tablename__ = "prompt_answer"

    task_hash: str = Field(primary_key=True, max_length=64)
    number: int = Field(primary_key=True)
    session_id: str = Field(max_length=140)
    answer: str = Field(sa_column=Column(Text, nullable=False))  # JSON
    answered_at: int = Field(default=0, sa_type=BigInteger)


class SessionSummaryRow(SQLModel, table=True):
    """A session's rolling summary and where it stands (the newest row of a session counts)."""

    __tablename__ = "session_summary"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(max_length=140)
    summary: str = Field(sa_column=Column(Text, nullable=False))
    cursor: int = Field(default=0, sa_type=BigInteger)  # last message the summary covers
    reset_at: int = Field(default=0, sa_type=BigInteger)  # last message before the last /reset
    updated_at: int = Field(default=0, sa_type=BigInteger)


class CommandOnceRow(SQLModel, table=True):
    """A gateway command a platform delivered, by its delivery id: run once however often it
    is delivered."""

    __tablename__ = "command_once"

    source_key: str = Field(primary_key=True, max_length=200)
    session_id: str = Field(max_length=140)
    handled_at: int = Field(default=0, sa_type=BigInteger)


class RequestKeyRow(SQLModel, table=True):
    """A client's `Idempotency-Key`, scoped to its caller, and what its first request made: a
    repeat within the key's 24 hours is answered with that, never made again."""

    __tablename__ = "request_key"

    # "request:<sha256 of caller and key>"; a message it made has it as its `source_key`.
    key: str = Field(primary_key=True, max_length=200)
    fingerprint: str = Field(max_length=64)  # sha256 of what the request asked for
    session_id: str = Field(max_length=140)
    task_hash: str = Field(default="", max_length=64)  # the task a sent message started
    schedule_id: int = Field(default=0, sa_type=BigInteger)  # the schedule it made
    created_at: int = Field(default=0, sa_type=BigInteger)  # Unix ms


class ScheduleRow(SQLModel, table=True):
    """A prompt that runs as a task of its session at each due time (`/schedule`)."""

    __tablename__ = "schedule"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(max_length=140)
    spec: str = Field(max_length=200)  # "every 30m", or five cron fields
    prompt: str = Field(sa_column=Column(Text, nullable=False))
    timezone: str = Field(default="UTC", max_length=64)  # what a cron spec's hours mean
    # A due time missed while no gateway ran: "once" runs it once on start, "skip" drops it.
    misfire: str = Field(default="once", max_length=8)
    created_by_id: str = Field(default="", max_length=200)  # `platform:sender id`
    created_by_name: str = Field(default="", max_length=200)
    created_at: int = Field(default=0, sa_type=BigInteger)  # Unix ms
    next_due_at: int = Field(default=0, sa_type=BigInteger)  # Unix ms
    last_fired_at: int = Field(default=0, sa_type=BigInteger)  # Unix ms, 0 before the first
    # Not firing since (Unix ms), because the identity it acts for was revoked or banned.
    suspended_at: int = Field(default=0, sa_type=BigInteger)
    suspended_reason: str = Field(default="", max_length=200)


class EmbeddingRow(SQLModel, table=True):
    """The embedding of one archived message, or of one version of the rolling summary
    (`kind`), by one embedding model: what semantic recall searches (gateway.memory)."""

    __tablename__ = "embedding"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(max_length=140)
    kind: str = Field(default="message", max_length=16)  # message | summary
    # The archived message's id; for a summary, the last message it covers (its cursor).
    message_id: int = Field(sa_type=BigInteger)
    model: str = Field(max_length=200)
    dim: int
    vector: bytes = Field(sa_column=Column(LargeBinary, nullable=False))  # float32, little-endian
    # A summary's text (it is replaced by the next fold); empty for a message, read from
    # `messages`.
    text: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))


class EmbeddingCursorRow(SQLModel, table=True):
    """How far a session's embeddings reach: each message is embedded once, in id order. One
    row per session in practice; a session renamed into another that had one keeps both, and
    the newest counts (as with the summary)."""

    __tablename__ = "embedding_cursor"

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(max_length=140)
    model: str = Field(max_length=200)  # the model the session's embeddings are made with
    message_cursor: int = Field(default=0, sa_type=BigInteger)  # last message embedded
    summary_cursor: int = Field(default=0, sa_type=BigInteger)  # cursor of the last summary
    # Changes whenever embeddings are dropped (`agenvoy reindex`), so in-process indexes built
    # from the older ones know to start over.
    epoch: str = Field(default="", max_length=32)


class SessionShareRow(SQLModel, table=True):
    """An identity a session's owner shared it with."""

    __tablename__ = "session_share"

    session_id: str = Field(primary_key=True, max_length=140)
    identity: str = Field(primary_key=True, max_length=200)
    mode: str = Field(max_length=8)  # "read" | "write"
    shared_at: int = Field(default=0, sa_type=BigInteger)


class IdentityLinkRow(SQLModel, table=True):
    """An identity joined to a person (the identity it was linked to)."""

    __tablename__ = "identity_link"

    identity: str = Field(primary_key=True, max_length=200)
    person: str = Field(max_length=200)
    linked_by: str = Field(default="", max_length=200)
    linked_at: int = Field(default=0, sa_type=BigInteger)


class LinkCodeRow(SQLModel, table=True):
    """A one-time code that links the identity that asked for it to the one that enters it."""

    __tablename__ = "link_code"

    code_hash: str = Field(primary_key=True, max_length=64)
    identity: str = Field(max_length=200)
    expires_at: int = Field(sa_type=BigInteger)


class LinkAttemptRow(SQLModel, table=True):
    """The wrong link codes an identity entered lately (Unix ms, comma-separated), kept in the
    archive so that every instance counts the same guesses."""

    __tablename__ = "link_attempt"

    identity: str = Field(primary_key=True, max_length=200)
    misses: str = Field(default="", sa_type=Text)


class BanRow(SQLModel, table=True):
    """A member kept out of one chat (`scope` its session id) or of the gateway (`*`)."""

    __tablename__ = "ban"

    scope: str = Field(primary_key=True, max_length=140)
    identity: str = Field(primary_key=True, max_length=200)
    banned_by: str = Field(default="", max_length=200)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    created_at: int = Field(default=0, sa_type=BigInteger)


class QuotaRow(SQLModel, table=True):
    """An identity's or a chat's own limits, over the settings' defaults."""

    __tablename__ = "quota"

    subject: str = Field(primary_key=True, max_length=200)  # identity key or session id
    limits: str = Field(default="{}", sa_column=Column(Text, nullable=False, server_default="{}"))
    updated_by: str = Field(default="", max_length=200)
    updated_at: int = Field(default=0, sa_type=BigInteger)


class ConsoleSigninRow(SQLModel, table=True):
    """A console sign-in, known by the SHA-256 of its cookie."""

    __tablename__ = "console_signin"

    id_hash: str = Field(primary_key=True, max_length=64)
    identity: str = Field(max_length=200)
    name: str = Field(default="", max_length=200)
    created_at: int = Field(sa_type=BigInteger)
    expires_at: int = Field(sa_type=BigInteger)
    # The SHA-256 of the credential it was made with (migration 0017).
    credential: str = Field(default="", max_length=64)


# Every table whose rows belong to one session, known by its `session_id` column: what deleting
# or renaming a session covers, besides the `session` row itself. Derived rather than listed,
# so a new table is covered the day its model is written (test_schema checks that the migrated
# database has no other table with that column).
PER_SESSION_TABLES: Final[tuple[Table, ...]] = tuple(
    table for table in SQLModel.metadata.sorted_tables if "session_id" in table.columns
)
