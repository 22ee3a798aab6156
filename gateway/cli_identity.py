"""`agenvoy identity link|unlink|show`: the operator joins and parts a person's identities,
writing the archive directly (the next request on any instance sees it).
`agenvoy link` (the terminal user's own code) is a client of the running gateway, with the
terminal's other client commands."""

from __future__ import annotations

import getpass
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gateway.cli_support import fail, with_store

if TYPE_CHECKING:
    from gateway.store.ownership import Ownership

T = TypeVar("T")

# `platform:sender id`: what an identity key looks like wherever one is given.
_KEY = re.compile(r"[a-z]{1,16}:[^\s:][^\s]{0,180}")


def _identity(value: str) -> str:
    if not _KEY.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not an identity (platform:sender id)")
    return value


Identity = Annotated[
    str,
    typer.Argument(
        callback=_identity, help="platform:sender id (telegram:42, discord:123, http:bob)."
    ),
]

identity_app = typer.Typer(
    help="Link one person's identities on several front-ends, part them, show them.",
    no_args_is_help=True,
)


def _with_ownership(work: Callable[[Ownership], Awaitable[T]]) -> T:
    return with_store(lambda store: work(store.ownership))


def _others(identities: frozenset[str], own: str) -> str:
    return ", ".join(sorted(identities - {own})) or "none"


def _by() -> str:
    return f"terminal:{getpass.getuser()}"


@identity_app.command("link")
def identity_link(identity: Identity, to: Identity) -> None:
    """Join IDENTITY (and whatever it is linked with) to the person of TO."""
    if identity == to:
        fail("an identity is linked with itself already", 2)

    async def work(ownership: Ownership) -> frozenset[str]:
        return await ownership.link(identity, to, by=_by())

    joined = _with_ownership(work)
    typer.echo(f"linked: {identity} with {_others(joined, identity)}")


@identity_app.command("unlink")
def identity_unlink(identity: Identity) -> None:
    """Take IDENTITY out of the person it is linked with."""

    async def work(ownership: Ownership) -> bool:
        return await ownership.unlink(identity, by=_by())

    if not _with_ownership(work):
        fail(f"{identity} is linked with nobody", 1)
    typer.echo(f"{identity} is linked with nobody now")


@identity_app.command("show")
def identity_show(identity: Identity) -> None:
    """The identities linked with IDENTITY."""

    async def work(ownership: Ownership) -> frozenset[str]:
        return await ownership.linked(identity)

    typer.echo(f"{identity}: linked with {_others(_with_ownership(work), identity)}")


@identity_app.command("own")
def identity_own(
    identity: Identity,
    session_ids: Annotated[
        list[str], typer.Argument(help="Private sessions (cli-, chat-, temp-).")
    ],
) -> None:
    """Make IDENTITY the owner of private sessions: those made before sessions had owners
    are reached by gateway admins only until they are given one."""
    from gateway.ids import InvalidSessionId, validate_session_id
    from gateway.ownership import is_shared

    for session_id in session_ids:
        try:
            validate_session_id(session_id)
        except InvalidSessionId as exc:
            fail(str(exc), 2)
        if is_shared(session_id):
            fail(f"{session_id} is a shared chat: its members are its platform's", 2)

    async def work(ownership: Ownership) -> list[str]:
        return [s for s in session_ids if not await ownership.set_owner(s, identity)]

    missing = _with_ownership(work)
    for session_id in session_ids:
        typer.echo(f"{session_id}: {'no such session' if session_id in missing else identity}")
    if missing:
        raise typer.Exit(1)
