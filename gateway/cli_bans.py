"""`agenvoy ban`, `agenvoy unban` and `agenvoy bans`: the operator's bans, over the whole
gateway (scope `*`) or one chat. They write the archive directly; a running gateway applies
them within a second (gateway/bans.py)."""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gateway.cli_support import checked_id, fail, printable, with_store

if TYPE_CHECKING:
    from gateway.store.bans import BanList

T = TypeVar("T")

Chat = Annotated[
    str,
    typer.Option("--chat", help="Only in this shared chat (a dc-/tg- session id); default: all."),
]
Identity = Annotated[
    str, typer.Argument(help="The identity: platform:sender id (discord:123, http:bob).")
]


def _with_bans(work: Callable[[BanList], Awaitable[T]]) -> T:
    from gateway.store.bans import BanList

    return with_store(lambda store: work(BanList(store.db)))


def _scope(chat: str) -> str:
    from gateway.bans import chat_scope
    from gateway.ownership import is_shared
    from gateway.store.bans import EVERYWHERE

    if not chat:
        return EVERYWHERE
    checked = checked_id(chat)
    if not is_shared(checked):
        raise typer.BadParameter("bans are for shared chats (dc-, tg-) or the whole gateway")
    return chat_scope(checked)


def _identity(value: str) -> str:
    from gateway.bans import identity_of

    if ":" not in value:
        raise typer.BadParameter("give the identity as platform:sender id, e.g. discord:123")
    try:
        return identity_of(value, "")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def ban(
    identity: Identity,
    chat: Chat = "",
    reason: Annotated[str, typer.Option("--reason", help="Why; shown by `bans`.")] = "",
) -> None:
    """Keep IDENTITY (and every identity linked with it) from starting anything: its
    messages are turned away and not kept."""
    from gateway.bans import MAX_REASON_CHARS
    from gateway.clock import now_ms

    who, scope = _identity(identity), _scope(chat)
    if len(reason) > MAX_REASON_CHARS:
        raise typer.BadParameter(f"the reason is longer than {MAX_REASON_CHARS} characters")
    by = f"terminal:{getpass.getuser()}"
    added = _with_bans(lambda bans: bans.add(scope, who, by=by, reason=reason, at=now_ms()))
    where = "everywhere" if scope == "*" else f"in {scope}"
    typer.echo(f"banned {who} {where}" if added else f"{who} is banned {where} already")


def unban(identity: Identity, chat: Chat = "") -> None:
    """Lift a ban of IDENTITY."""
    who, scope = _identity(identity), _scope(chat)
    if not _with_bans(lambda bans: bans.remove(scope, who)):
        fail(f"{who} is not banned {'everywhere' if scope == '*' else f'in {scope}'}", 1)
    typer.echo(f"unbanned {who}")


def bans(chat: Chat = "") -> None:
    """The bans: everywhere (*) and in each chat, oldest first."""
    scope = _scope(chat) if chat else None
    found = _with_bans(lambda listing: listing.listed(scope))
    if not found:
        typer.echo("nobody is banned")
    for each in found:
        when = datetime.fromtimestamp(each.created_at / 1000, UTC).strftime("%Y-%m-%d %H:%M")
        why = f"  {printable(each.reason)}" if each.reason else ""
        typer.echo(f"{each.scope}  {printable(each.identity)}  by {each.banned_by}  {when}{why}")
