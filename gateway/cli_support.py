"""What every `agenvoy` command shares, the gateway's own and the client ones alike: the
settings loaded with a readable error, session ids checked where they are typed, and how a
command gives up.

It stays light to import: `agenvoy --help` loads this module but needs neither pydantic nor
the logging set-up, so those come in only when a command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import typer

from gateway.ids import InvalidSessionId, validate_session_id

if TYPE_CHECKING:
    from gateway.settings import Settings


def fail(message: str, code: int) -> NoReturn:
    """Say what went wrong on stderr, in red, and end the command with `code`."""
    typer.secho(message, fg="red", err=True)
    raise typer.Exit(code)


def load_settings(*, quiet: bool = True) -> Settings:
    from pydantic import ValidationError

    from gateway.logs import configure_logging
    from gateway.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        fail(f"invalid settings:\n{exc}", 2)
    # One-shot commands keep their output clean; `run` logs at the configured level.
    level = "WARNING" if quiet and settings.log_level == "INFO" else settings.log_level
    configure_logging(level, settings.log_format)
    return settings


def checked_id(value: str) -> str:
    """A session id argument, refused as a bad parameter (status 2) unless it is valid."""
    try:
        return validate_session_id(value)
    except InvalidSessionId as exc:
        raise typer.BadParameter(str(exc)) from exc
