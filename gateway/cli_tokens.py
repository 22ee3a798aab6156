"""`agenvoy token add|list|remove`: the per-user API tokens, kept (as their hashes) in the
archive, so that every instance on it accepts the same ones; a change holds on each within a
second. A home's old `api_tokens.json` is taken in first."""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gateway.cli_support import fail, load_settings, with_store

if TYPE_CHECKING:
    from gateway.store.sessions import SessionStore
    from gateway.store.tokens import TokenStore

T = TypeVar("T")

token_app = typer.Typer(
    help="Per-user API tokens: the token a caller sends decides who they are.",
    no_args_is_help=True,
)


def _with_tokens(work: Callable[[TokenStore], Awaitable[T]]) -> T:
    """Run `work` on the archive's issued tokens, a home's old token file taken in first."""
    from gateway.clock import now_ms
    from gateway.store.tokens import TokenStore

    settings = load_settings()

    async def run(store: SessionStore) -> T:
        tokens = TokenStore(store.db)
        await tokens.import_file(settings.store_dir, at=now_ms())
        return await work(tokens)

    return with_store(run)


@token_app.command("add")
def token_add(
    name: Annotated[str, typer.Argument(help="The sender id it stands for (http:NAME).")],
    display: Annotated[str, typer.Option("--display", help="Display name.")] = "",
) -> None:
    """Issue a token for NAME and print it; only its hash is kept, so it is shown only now.
    Every gateway instance on this archive accepts it within a second."""
    from gateway.clock import now_ms
    from gateway.credentials import TokenRefused, new_token

    try:
        token, issued = new_token(name, display)
        _with_tokens(lambda tokens: tokens.issue(issued, by=_operator(), at=now_ms()))
    except TokenRefused as exc:
        fail(str(exc), 2)
    typer.echo(token)


@token_app.command("list")
def token_list() -> None:
    """Who holds a token (the tokens themselves are not kept)."""
    tokens = _with_tokens(lambda tokens: tokens.load())
    if not tokens:
        typer.echo("no tokens issued")
    for issued in tokens:
        typer.echo(f"http:{issued.name}  {issued.display}")


@token_app.command("remove")
def token_remove(name: str) -> None:
    """Revoke NAME's token; every running instance stops accepting it, ends its streams and
    suspends its schedules within a second."""
    from gateway.clock import now_ms

    if not _with_tokens(lambda tokens: tokens.revoke(name, by=_operator(), at=now_ms())):
        fail(f"no token for {name!r}", 1)
    typer.echo(f"revoked the token of {name}")


def _operator() -> str:
    return f"terminal:{getpass.getuser()}"
