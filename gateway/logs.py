"""structlog configuration: one call at start-up, `get_logger` everywhere else.

Libraries that log through the standard `logging` module (alembic, discord.py,
python-telegram-bot, aiohttp, httpx) are rendered by the same renderer, so one deployment
produces one log format, and every line, ours or theirs, has the configured secrets masked
(`hide_secrets`): the Bot API puts the bot token in every URL it is called at.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

import structlog
from pydantic import SecretStr

from gateway.settings import LogFormat, Settings

MASK = "***"

_SHARED: list[structlog.types.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


class _CurrentStderr:
    """Writes to whatever `sys.stderr` is at the time of writing.

    Binding the stream object at configuration time breaks when it is later replaced (test
    capture, daemonising) and then closed: every later log call would raise.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


_STDERR = _CurrentStderr()


class _SecretMask:
    """A processor that runs after the renderer and masks the secrets in the finished line.

    Masking the rendered text rather than the event's fields catches a secret wherever it is
    carried: a field, a URL object's repr, a library's message, an exception's traceback. Both
    chains end with it, structlog's own and the one stdlib records are rendered through.
    """

    def __init__(self) -> None:
        self._pattern: re.Pattern[str] | None = None
        self._settings: set[str] = set()  # the settings' (`hide_secrets`)
        self._more: set[str] = set()  # learnt while running (`hide_also`)

    def use(self, secrets: Iterable[str]) -> None:
        self._settings = {secret for secret in secrets if secret}
        self._compile()

    def add(self, secret: str) -> None:
        if secret and secret not in self._more:
            self._more.add(secret)
            self._compile()

    def _compile(self) -> None:
        secrets = self._settings | self._more
        forms = {form for secret in secrets for form in _written_forms(secret)}
        # Longest first, so a secret that contains another is masked whole.
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __call__(self, logger: Any, method: str, line: Any) -> Any:
        return self.redact(line) if isinstance(line, str) else line

    def redact(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(MASK, text)


def _written_forms(secret: str) -> set[str]:
    # As it is, and as the JSON renderer escapes it.
    return {secret, json.dumps(secret)[1:-1]}


_MASK_SECRETS = _SecretMask()


def hide_secrets(settings: Settings) -> None:
    """Mask the settings' secrets in every log line from now on: each secret setting (the
    platform tokens, the API token, the OpenAI key…) and the passwords of the database and
    KV URLs. The composition root calls it once the settings are read."""
    secrets = [
        value.get_secret_value()
        for name in type(settings).model_fields
        if isinstance(value := getattr(settings, name), SecretStr)
    ]
    for url in (settings.resolved_database_url, settings.resolved_kv_url):
        password = urlsplit(url).password
        if password:
            secrets += [password, unquote(password)]
    _MASK_SECRETS.use(secrets)


def hide_also(secret: str) -> None:
    """Mask `secret` in every log line from now on, besides the settings' own: a token read
    while running (a platform connection's, gateway/connections.py)."""
    _MASK_SECRETS.add(secret)


def redact(text: str) -> str:
    """`text` with the secrets `hide_secrets` was given masked, for output that is not a log
    line (a start-up failure said on stderr)."""
    return _MASK_SECRETS.redact(text)


def configure_logging(level: str = "INFO", fmt: LogFormat = LogFormat.console) -> None:
    renderer: structlog.types.Processor
    if fmt is LogFormat.json:
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    numeric = logging.getLevelNamesMapping()[level]
    structlog.configure(
        processors=[
            *_SHARED,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
            _MASK_SECRETS,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=_STDERR),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(_STDERR)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                # A library's traceback as text, as ours are (JSON would show a tuple's repr).
                structlog.processors.format_exc_info,
                renderer,
                _MASK_SECRETS,
            ],
            foreign_pre_chain=[*_SHARED, structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # Chatty at INFO about routine work: each migration step, each file-change batch, and each
    # request an HTTP client makes (their URLs are no business of the log).
    # The MCP SDK and its HTTP client (httpx2) likewise: each message, each request.
    for name in (
        "alembic",
        "watchfiles",
        "httpx",
        "httpcore",
        "hpack",
        "aiohttp.client",
        "httpx2",
        "mcp",
    ):
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
