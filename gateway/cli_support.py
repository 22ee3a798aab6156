"""What every `agenvoy` command shares, the gateway's own and the client ones alike: the
settings loaded with a readable error, session ids checked where they are typed, how a
command gives up, and text from the archive or the gateway made safe to print.

It stays light to import: `agenvoy --help` loads this module but needs neither pydantic nor
the logging set-up, so those come in only when a command runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer

from gateway.ids import InvalidSessionId, validate_session_id

if TYPE_CHECKING:
    from gateway.settings import Settings
    from gateway.store.sessions import SessionStore

T = TypeVar("T")


def _escape(code: int) -> str:
    short = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(chr(code))
    return short or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


# Characters that act on a terminal instead of showing: the C0 controls (ESC starts escape
# sequences: window titles, clearing the screen; CR and LF start forged lines), DEL, the C1
# controls, the bidirectional embeddings, overrides, isolates and marks (text shown in another
# order than it reads), and the Unicode line and paragraph separators.
_UNPRINTABLE = [
    *range(0x20),
    *range(0x7F, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0x2028,
    0x2029,
]
_ON_ONE_LINE = {code: _escape(code) for code in _UNPRINTABLE}
_IN_A_BODY = {code: _escape(code) for code in _UNPRINTABLE if chr(code) not in "\n\t"}


def printable(text: str, *, body: str | None = None) -> str:
    """`text` from the archive or the gateway, safe for the operator's terminal: every
    character above shown as a visible escape (`\\x1b`, `\\u202e`).

    On one line, unless `body` is given: then it is a message body whose line breaks (and
    tabs) stay, and every line after the first starts with `body`, so that none of its lines
    can pass for one of the command's own.
    """
    if body is None:
        return text.translate(_ON_ONE_LINE)
    lines = text.replace("\r\n", "\n").translate(_IN_A_BODY)
    return lines.replace("\n", "\n" + body) if body else lines


def fail(message: str, code: int) -> NoReturn:
    """Say what went wrong on stderr, in red, and end the command with `code`."""
    typer.secho(printable(message, body=""), fg="red", err=True)
    raise typer.Exit(code)


def load_settings(*, quiet: bool = True, logs: bool = True) -> Settings:
    """The settings, or the command ends with what is wrong with them. With `logs`, the
    gateway's logging is set up too; the client commands, which only talk to a running
    gateway, go without (it is most of their start-up time)."""
    from pydantic import ValidationError

    from gateway.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        fail(f"invalid settings:\n{exc}", 2)
    if logs:
        from gateway.logs import configure_logging

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


def with_store(work: Callable[[SessionStore], Awaitable[T]]) -> T:
    """Run `work` on the archive the settings name, opened for it and closed after; an
    archive that cannot be reached ends the command (exit 1)."""
    from gateway.store.db import DatabaseError
    from gateway.store.sessions import SessionStore

    settings = load_settings()

    async def main() -> T:
        store = await SessionStore.open(settings)
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except DatabaseError as exc:
        fail(f"database: {exc}", 1)
