"""`agenvoy connection list|set|reset`: which bot token Telegram and Discord connect with, by
reference (env:NAME or file:NAME), or that one is off. They write the archive directly; a
running gateway (every instance) connects, reconnects or disconnects within seconds."""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gateway.cli_support import fail, load_settings, printable, with_store

if TYPE_CHECKING:
    from gateway.connections import Connections

T = TypeVar("T")

connection_app = typer.Typer(
    help="Platform connections: the bot token each platform connects with, changed live.",
    no_args_is_help=True,
)
Platform = Annotated[str, typer.Argument(help="telegram or discord.")]


def _with_connections(work: Callable[[Connections], Awaitable[T]]) -> T:
    from gateway.clock import SYSTEM_CLOCK
    from gateway.connections import ConnectionInvalid, Connections
    from gateway.store.connections import ConnectionStore

    settings = load_settings()
    try:
        return with_store(
            lambda store: work(Connections(ConnectionStore(store.db), settings, SYSTEM_CLOCK))
        )
    except ConnectionInvalid as exc:
        fail(str(exc), 2)


@connection_app.command("list")
def connection_list() -> None:
    """Each platform: where its token comes from now, and who changed it when."""
    from gateway.connections import ConnectionView

    def line(view: ConnectionView) -> str:
        row, wanted = view.configured, view.wanted
        said = f"{view.platform:<9} {wanted.source}"
        if row is not None:
            when = datetime.fromtimestamp(row.changed_at / 1000, UTC).strftime("%Y-%m-%d %H:%M")
            said += f" (by {row.changed_by}, {when} UTC)"
        if wanted.problem:
            said += f": {wanted.problem}"
        return said

    for view in _with_connections(lambda connections: connections.views()):
        typer.echo(printable(line(view)))


@connection_app.command("set")
def connection_set(
    platform: Platform,
    token: Annotated[str, typer.Argument(help="Where the bot token is: env:NAME or file:NAME.")],
    off: Annotated[
        bool, typer.Option("--off", help="Keep it configured but not connected.")
    ] = False,
) -> None:
    """Connect PLATFORM with the token TOKEN names (or configure it off)."""
    by = f"terminal:{getpass.getuser()}"
    _with_connections(lambda connections: connections.put(platform, token, not off, by=by))
    state = "off" if off else f"connects with {token}"
    typer.echo(f"{platform}: {state} (a running gateway applies it within seconds)")


@connection_app.command("reset")
def connection_reset(platform: Platform) -> None:
    """Forget PLATFORM's connection: its token comes from the environment again."""
    by = f"terminal:{getpass.getuser()}"
    if not _with_connections(lambda connections: connections.reset(platform, by=by)):
        fail(f"{platform} has no connection configured", 1)
    typer.echo(f"{platform}: the environment's token again")
