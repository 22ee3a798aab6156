"""Every setting of the gateway, read from the environment and an optional `.env` file.

Each field here is listed, with a comment, in `.env.example`.
"""

from __future__ import annotations

import re
import socket
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.client_settings import (
    DEFAULT_HOME,
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_PORT,
    ENV_FILE,
    ENV_PREFIX,
    ClientSettings,
)
from gateway.discord_settings import DiscordSettings
from gateway.fallback_settings import FallbackSettings
from gateway.quota_settings import QuotaSettings


class LogFormat(StrEnum):
    console = "console"
    json = "json"


class TelegramMode(StrEnum):
    polling = "polling"
    webhook = "webhook"


# parts: quota_settings, discord_settings, fallback_settings
class Settings(QuotaSettings, DiscordSettings, FallbackSettings, BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX.upper(),
        env_file=ENV_FILE,
        env_file_encoding="utf-8",
        extra="ignore",
        # Fields with an alias (a second environment name) are still given by name in code.
        populate_by_name=True,
    )

    home: Path = Field(default=Path(DEFAULT_HOME))
    database_url: str = ""
    kv_url: str = ""
    log_format: LogFormat = LogFormat.console
    log_level: str = "INFO"

    # Identifies this process among several sharing one KV store; presence keys carry it so a
    # restarted instance can clear the keys its previous life left behind.
    instance_id: str = Field(default_factory=socket.gethostname)
    presence_ttl_seconds: float = 60.0
    presence_refresh_seconds: float = 55.0
    # A task shows up as running once it has run this long: most replies come sooner, and
    # they then cost no presence writes at all.
    presence_grace_seconds: float = Field(0.5, ge=0)

    # For crash tests only: the process kills itself (SIGKILL) at this named step of a task's
    # life, e.g. "stored" or "tool_ran:2" (see gateway/crash.py). Never set it in production.
    crash_at: str = ""

    history_max_bytes: int = 5 * 1024 * 1024
    action_log_max_bytes: int = 10 * 1024 * 1024
    usage_retention_days: int = 28

    # The agent that answers: "offline" (deterministic, no network), "openai", "claude" or
    # "claude-code".
    agent: str = "offline"
    # Who may answer any prompt and run admin-only commands, as platform:user-id pairs,
    # e.g. "discord:123,telegram:456".
    admins: str = ""
    confirm_timeout_seconds: float = 600.0
    # A reply or prompt the platform keeps failing to take is tried again, with backoff, for
    # this long after its first failed attempt; then it is marked failed.
    outbox_expiry_seconds: float = 6 * 3600.0
    max_concurrent_tasks: int = 16
    # One sender (a platform user, an HTTP identity) may have this many tasks running at once
    # and this many waiting or running: one client cannot take every slot or flood a queue.
    max_running_per_sender: int = 4
    max_pending_per_sender: int = 100
    # Messages one session may have waiting behind its running task; past it, a message is
    # refused with a clear reply (a busy group chat cannot pile up hours of work).
    max_queued_per_session: int = 100
    # Subagents (`delegate`): how deep they may nest (0: none at all) and how many one task may
    # start, so a model cannot fan out without end.
    max_subagent_depth: int = Field(2, ge=0, le=10)
    max_subagents_per_task: int = Field(4, ge=0, le=100)
    max_message_chars: int = 16_000
    # Messages of recent history handed to the agent with each new message.
    history_window: int = 24
    # How often tasks that died with their process (this one's previous life, or an instance
    # whose presence has expired) are looked for and taken up, besides at start-up.
    recovery_interval_seconds: float = 15.0
    # Several instances on one PostgreSQL database: an instance that dies (or loses the
    # database) gives up the sessions it ran within this many seconds, and another takes them.
    lease_ttl_seconds: float = 15.0
    temp_idle_seconds: float = 1800.0
    cleanup_interval_seconds: float = 1800.0
    # Schedules (`/schedule`): how often due ones are looked for, and the time zone a cron
    # spec is read in when its schedule names none.
    schedule_check_seconds: float = 10.0
    schedule_timezone: str = "UTC"
    # Schedules per identity (linked ones together; 0: any), shortest gap between two firings.
    max_schedules_per_identity: int = Field(20, ge=0)
    min_schedule_interval_seconds: int = Field(60, ge=0)
    # How long a read-only tool's result (list_files, read_file, search_history) is served
    # from the session's tool cache while nothing it read has changed; 0 turns the cache off.
    tool_cache_seconds: float = Field(300.0, ge=0)
    # How long a failed tool call is remembered, so that the agent is told about the failure
    # before it repeats the same call; 0 turns the error memory off.
    error_memory_seconds: float = Field(3600.0, ge=0)

    # The openai agent: any OpenAI-compatible chat-completions endpoint.
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    # Model for rolling summaries; empty = the agent's model (`model`, `anthropic_model`).
    summary_model: str = ""
    max_tool_iterations: int = 32
    # Semantic recall (gateway/memory): the model of the endpoint's /v1/embeddings (same base
    # URL and key as above); empty = a local embedder, no network. Changing it takes
    # `agenvoy reindex` before older messages are found again.
    embedding_model: str = ""
    # With no endpoint model: auto = the local sentence-embedding model when the `embeddings`
    # extra is installed, else hashed trigrams (lexical only); off = hashed trigrams always.
    local_embeddings: Literal["auto", "off"] = "auto"
    # How often messages archived since are embedded (in the background, on one instance).
    embedding_interval_seconds: float = 5.0
    # Older messages recalled into each task's context (0: none), and how similar (cosine)
    # one must be to the new message, or to a search, to be recalled; unset (empty) = the
    # active embedder's own threshold, since their scales differ (gateway/memory/embedders.py).
    recall_count: int = Field(3, ge=0, le=20)
    recall_min_score: float | None = Field(None, ge=-1, le=1)
    # Knowledge (gateway/knowledge): passages of attached documents given to each task's
    # model (0: none), the similarity one needs (unset: the embedder's own threshold), the
    # largest document taken, and the hosts a document may be fetched from by URL
    # (comma-separated; `*.example.org` for its subdomains; empty: no URL is fetched).
    knowledge_count: int = Field(3, ge=0, le=10)
    knowledge_min_score: float | None = Field(None, ge=-1, le=1)
    knowledge_max_bytes: int = Field(5_000_000, ge=1_000, le=100_000_000)
    knowledge_hosts: str = ""
    # Default reasoning effort for models that support it (low|medium|high); empty = the
    # provider's default. `/reasoning` and `PUT /v1/session/{sid}` override it per session.
    reasoning: Literal["", "low", "medium", "high"] = ""
    openai_timeout_seconds: float = 120.0
    # The claude-code agent: the Claude Code CLI (a name on PATH or a path), run once per task
    # in the session workspace. `model` picks its model too ("sonnet", "opus" or a full id).
    claude_code_bin: str = "claude"
    # More variables of the gateway's environment the CLI gets, comma-separated names (or
    # prefixes ending in `*`, e.g. `AWS_*` for Bedrock). It gets only the basics (PATH, HOME,
    # locale, proxies, certificates) and its own ANTHROPIC_* / CLAUDE_* settings otherwise.
    claude_code_env: str = ""
    # MCP servers whose tools the openai, claude and claude-code agents get: a JSON file
    # (`{"mcpServers": {...}}`); empty = `<home>/mcp.json`, used when it exists.
    mcp_config: str = ""
    # How long one MCP tool call may take, and a server to start and list its tools.
    mcp_call_timeout_seconds: float = Field(120.0, gt=0)
    mcp_start_timeout_seconds: float = Field(30.0, gt=0)
    # Agent profiles: the file their `file:NAME` key references read (`NAME=value` lines,
    # mode 0600); empty = `<home>/secrets.env`.
    profile_secrets_file: Path | None = None
    # How often each instance looks for a platform connection changed elsewhere (another
    # instance, `agenvoy connection`); one made here applies at once.
    connection_check_seconds: float = Field(5.0, gt=0)
    # The claude agent: the Anthropic Messages API. The key is also read from
    # ANTHROPIC_API_KEY, the name Anthropic's own tools use, when the AGENVOY_ one is unset.
    anthropic_base_url: str = "https://api.anthropic.com"
    anthropic_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("AGENVOY_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY")
    )
    anthropic_model: str = "claude-sonnet-4-5"
    # Tokens the answer itself may take; a reasoning level's thinking budget comes on top.
    anthropic_max_tokens: int = 8192
    # Seconds a call may go without a byte from the API (it sends pings while it works).
    anthropic_timeout_seconds: float = 120.0

    # Images a message brings are shown to the model (openai and claude agents) unless this is
    # off; then, as for a model matched by `text_only_models`, it reads a line describing them.
    vision: bool = True
    # Models that take no images, comma-separated names or shell-style patterns ("llama3*").
    text_only_models: str = ""
    # An image is scaled down until its longest side and its encoded size fit these: the
    # Anthropic API scales anything past 1,568 px itself and refuses more than 5 MB of base64
    # (3.75 MB of image); OpenAI-compatible endpoints take as much.
    image_max_side: int = Field(1568, ge=64)
    image_max_bytes: int = Field(3_932_160, ge=16_384)
    # What decoding one image may take in memory (pixels times bytes each, working copies included;
    # a JPEG is decoded scaled down), and how many images decode at once.
    image_decode_budget_bytes: int = Field(201_326_592, ge=1_048_576)
    image_decode_concurrency: int = Field(2, ge=1)
    # Voice notes and audio files are transcribed with this model through the openai settings'
    # endpoint (`/audio/transcriptions`, e.g. whisper-1); empty = not transcribed.
    transcribe_model: str = ""

    http_host: str = DEFAULT_HTTP_HOST
    http_port: int = DEFAULT_HTTP_PORT
    # Bearer token for the HTTP API, one identity (`http:api`); it or a token issued with
    # `agenvoy token add` is required when http_host is not a loopback address.
    api_token: SecretStr | None = None
    # Host names (besides loopback and http_host) the API answers to, comma-separated: the
    # names clients reach it by behind a proxy. Any other Host header is refused.
    http_allowed_hosts: str = ""
    # Browser origins (scheme://host[:port]) allowed to call the API; empty = none.
    http_allowed_origins: str = ""
    # A connection with no request in progress (idle, or still sending its headers) is closed
    # after this many seconds.
    http_idle_timeout_seconds: float = 60.0
    # A request body must arrive within this many seconds.
    http_body_timeout_seconds: float = 30.0
    # A console sign-in ends this many hours after it was made (or when signed out, or when
    # its token is revoked).
    console_signin_hours: float = 12.0

    # A chat platform that cannot be reached is tried again, waiting twice as long each time
    # (from 1 s) up to this many seconds; the rest of the gateway serves meanwhile.
    platform_retry_max_seconds: float = 60.0

    # Telegram: the adapter starts when a token is set.
    telegram_token: SecretStr | None = None
    # Root of the Bot API server (a self-hosted Bot API server, or a test double).
    telegram_api_url: str = "https://api.telegram.org"
    # Chat ids allowed to use the bot, comma-separated; empty = every chat.
    telegram_allowed_chats: str = ""
    # Attachments larger than this are not downloaded (the Bot API serves at most 20 MB).
    telegram_max_download_bytes: int = 20 * 1024 * 1024
    # "polling" (no public address needed) or "webhook" (served by the gateway's HTTP server).
    telegram_mode: TelegramMode = TelegramMode.polling
    # The public https URL Telegram posts updates to; its path is served by the gateway.
    telegram_webhook_url: str = ""
    # Checked on every webhook call (X-Telegram-Bot-Api-Secret-Token): 1-256 of A-Z a-z 0-9 _ -
    telegram_webhook_secret: SecretStr | None = None

    @staticmethod
    def id_set(value: str) -> frozenset[int]:
        parts = (p.strip() for p in value.split(","))
        return frozenset(int(p) for p in parts if p.isdigit())

    @model_validator(mode="after")
    def _webhook_complete(self) -> Settings:
        if self.telegram_mode is TelegramMode.webhook:
            secret = (
                self.telegram_webhook_secret.get_secret_value()
                if self.telegram_webhook_secret
                else ""
            )
            if not self.telegram_webhook_url.startswith(("https://", "http://")):
                raise ValueError("telegram webhook mode needs AGENVOY_TELEGRAM_WEBHOOK_URL")
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret):
                raise ValueError(
                    "telegram webhook mode needs AGENVOY_TELEGRAM_WEBHOOK_SECRET "
                    "(1-256 characters of A-Z a-z 0-9 _ -)"
                )
        return self

    @property
    def secrets_path(self) -> Path:
        """The file `file:NAME` references read: a profile's key, a platform's token."""
        return self.profile_secrets_file or self.home / "secrets.env"

    @field_validator("admins", mode="after")
    @classmethod
    def _no_anonymous_admin(cls, value: str) -> str:
        # Every caller without a token is http:anonymous: as an admin it would make anyone who
        # reaches the API one.
        if "http:anonymous" in {k.strip() for k in value.split(",")}:
            raise ValueError(
                "AGENVOY_ADMINS may not list http:anonymous (every caller without a token); "
                "issue a token with `agenvoy token add NAME` and list http:NAME"
            )
        return value

    @property
    def telegram_allowed_chat_ids(self) -> frozenset[int]:
        chats = (c.strip() for c in self.telegram_allowed_chats.split(","))
        return frozenset(int(c) for c in chats if c.lstrip("-").isdigit())

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @field_validator("instance_id", mode="after")
    @classmethod
    def _default_instance(cls, value: str) -> str:
        return value.strip() or socket.gethostname()

    @field_validator("schedule_timezone", mode="after")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError(f"unknown time zone {value!r} (e.g. UTC, Europe/Paris)") from None
        return value

    @field_validator("recall_min_score", "knowledge_min_score", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        # `AGENVOY_RECALL_MIN_SCORE=` (as .env.example has it) means unset, not a bad number.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("log_level", mode="after")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("log level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return level

    @field_validator(
        "presence_refresh_seconds",
        "confirm_timeout_seconds",
        "outbox_expiry_seconds",
        "max_concurrent_tasks",
        "max_running_per_sender",
        "max_pending_per_sender",
        "max_queued_per_session",
        "max_message_chars",
        "history_window",
        "temp_idle_seconds",
        "recovery_interval_seconds",
        "lease_ttl_seconds",
        "cleanup_interval_seconds",
        "schedule_check_seconds",
        "embedding_interval_seconds",
        "http_idle_timeout_seconds",
        "http_body_timeout_seconds",
        "console_signin_hours",
        "platform_retry_max_seconds",
        "anthropic_max_tokens",
        "anthropic_timeout_seconds",
        mode="after",
    )
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be positive")
        return value

    @property
    def admin_keys(self) -> frozenset[str]:
        return frozenset(k.strip() for k in self.admins.split(",") if k.strip())

    @property
    def sessions_dir(self) -> Path:
        return self.home / "sessions"

    def client(self) -> ClientSettings:
        """What a client of this gateway needs of these settings."""
        token = self.api_token.get_secret_value() if self.api_token else ""
        return ClientSettings(self.home, self.http_host, self.http_port, token)

    @property
    def store_dir(self) -> Path:
        return self.home / ".store"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.store_dir / 'history.db'}"

    @property
    def resolved_kv_url(self) -> str:
        return self.kv_url or f"sqlite:///{self.store_dir / 'kv.db'}"

    def masked(self) -> dict[str, Any]:
        """Resolved settings for display: secrets and URL passwords hidden."""
        shown: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                shown[name] = "***" if value.get_secret_value() else ""
            elif value is None:
                shown[name] = ""
            else:
                shown[name] = str(value)
        shown["database_url"] = mask_url(self.resolved_database_url)
        shown["kv_url"] = mask_url(self.resolved_kv_url)
        return shown


def mask_url(url: str) -> str:
    """Hide the password of a `scheme://user:password@host/...` URL."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    creds, _, host = rest.partition("@")
    if ":" not in creds:
        return url
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
