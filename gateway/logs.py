"""structlog configuration: one call at start-up, `get_logger` everywhere else.

Libraries that log through the standard `logging` module (alembic, discord.py,
python-telegram-bot, aiohttp) are rendered by the same renderer, so one deployment produces one
log format.
"""

from __future__ import annotations

import logging
import sys

import structlog

from gateway.settings import LogFormat

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
                renderer,
            ],
            foreign_pre_chain=[*_SHARED, structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # Chatty at INFO about routine work (each migration step, each file-change batch).
    for name in ("alembic", "watchfiles"):
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
