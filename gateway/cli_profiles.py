"""`agenvoy profile list|show|set|history|rollback|delete` and `agenvoy bind|unbind|bindings`: the
operator's agent profiles and where they answer. They write the archive directly; a running
gateway (every instance) applies a change from its next task on, without a restart."""

from __future__ import annotations

import getpass
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gateway.cli_support import fail, load_settings, printable, with_store

if TYPE_CHECKING:
    from gateway.profiles.service import Profiles

T = TypeVar("T")

profile_app = typer.Typer(
    help="Agent profiles: named agent configurations, versioned (see also: agenvoy bind).",
    no_args_is_help=True,
)
Name = Annotated[str, typer.Argument(help="The profile's name (lower-case, digits, - and _).")]
Target = Annotated[
    str,
    typer.Argument(
        help="KIND:KEY, e.g. discord-channel:123, discord-thread:…, discord-category:…, "
        "discord-role:…, discord-guild:…, telegram-topic:CHAT:TOPIC, telegram-chat:CHAT, "
        "identity:http:bob, prefix:cli, session:dc-123."
    ),
]


def _by() -> str:
    return f"terminal:{getpass.getuser()}"


def _with_profiles(work: Callable[[Profiles], Awaitable[T]]) -> T:
    """Run `work` on the archive's profiles; a refused change ends the command (exit 2)."""
    from gateway.clock import SYSTEM_CLOCK
    from gateway.mcp_tools.config import load_config
    from gateway.profiles.bindings import BindingInvalid
    from gateway.profiles.service import Profiles, UnknownProfile
    from gateway.profiles.spec import ProfileInvalid
    from gateway.store.profiles import ProfileConflict, ProfileStore

    settings = load_settings()
    servers = frozenset(s.name for s in load_config(settings).servers)
    try:
        return with_store(
            lambda store: work(Profiles(settings, ProfileStore(store.db), SYSTEM_CLOCK, servers))
        )
    except (ProfileInvalid, BindingInvalid, UnknownProfile, ProfileConflict) as exc:
        fail(str(exc), 2)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@profile_app.command("list")
def profile_list() -> None:
    """Every profile with its current version (`default` is the environment's)."""

    async def work(profiles: Profiles) -> list[str]:
        lines = []
        for name in await profiles.names():
            version, spec = await profiles.get(name)
            what = " ".join(p for p in (spec.agent, spec.model) if p)
            lines.append(f"{name:<24} v{version:<4} {printable(what)}")
        return lines

    for line in _with_profiles(work):
        typer.echo(line)


@profile_app.command("show")
def profile_show(name: Name) -> None:
    """A profile's current fields (its key only as the reference it is)."""
    version, spec = _with_profiles(lambda profiles: profiles.get(name))
    typer.echo(f"{name} (version {version})")
    for field, value in spec.shown().items():
        shown = ",".join(value) if isinstance(value, list) else value
        shown = json.dumps(shown) if isinstance(shown, dict) else shown
        typer.echo(f"  {field}: {printable('' if shown is None else str(shown))}")


@profile_app.command("set")
def profile_set(
    name: Name,
    pairs: Annotated[
        list[str],
        typer.Argument(
            help="FIELD=VALUE: agent, model, base_url, key (env:NAME or file:NAME), persona, "
            "reasoning, allowed_tools, mcp_servers, fallbacks (comma-separated), "
            'history_window, budgets (JSON: {"tokens_day": N})'
        ),
    ],
) -> None:
    """Make NAME, or change it: a new version with the fields given."""
    from gateway.profiles.spec import ProfileInvalid, parse_pairs

    try:
        changes = parse_pairs(pairs)
    except ProfileInvalid as exc:
        fail(str(exc), 2)
    made = _with_profiles(lambda profiles: profiles.set(name, changes, by=_by()))
    typer.echo(f"{name}: version {made.version} ({printable(made.change)})")


@profile_app.command("history")
def profile_history(name: Name) -> None:
    """Every version of NAME: who changed what, when."""
    for v in _with_profiles(lambda profiles: profiles.history(name)):
        who = printable(v.changed_by) or "(unknown)"
        typer.echo(f"v{v.version:<4} {_when(v.changed_at)}  {who}: {printable(v.change)}")


@profile_app.command("rollback")
def profile_rollback(
    name: Name, version: Annotated[int, typer.Argument(help="The version to return to.")]
) -> None:
    """A new version of NAME holding the fields of VERSION."""
    made = _with_profiles(lambda profiles: profiles.rollback(name, version, by=_by()))
    typer.echo(f"{name}: version {made.version} ({printable(made.change)})")


@profile_app.command("delete")
def profile_delete(name: Name) -> None:
    """Delete NAME (refused while a binding or a fallback names it); its history stays, and
    `agenvoy profile rollback NAME VERSION` brings it back."""
    made = _with_profiles(lambda profiles: profiles.delete(name, by=_by()))
    typer.echo(f"{name}: deleted (version {made.version}; rollback brings it back)")


def bind(
    target: Target,
    profile: Annotated[str, typer.Argument(help="The profile that answers there.")],
    switchable: Annotated[
        str,
        typer.Option(
            "--switchable",
            help="Profiles the chat's admins may choose there (/agent use), comma-separated.",
        ),
    ] = "",
) -> None:
    """Bind a place or caller to a profile (the most specific binding answers)."""
    choices = tuple(n.strip() for n in switchable.split(",") if n.strip())
    made = _with_profiles(
        lambda profiles: profiles.bind(target, profile, by=_by(), switchable=choices)
    )
    extra = f" (admins may switch to: {', '.join(made.switchable)})" if made.switchable else ""
    typer.echo(f"{printable(made.target)} → {made.profile}{extra}")


def unbind(target: Target) -> None:
    """Remove a binding."""
    if not _with_profiles(lambda profiles: profiles.unbind(target, by=_by())):
        fail(f"no binding {printable(target)}", 1)
    typer.echo(f"unbound {printable(target)}")


def bindings() -> None:
    """Every binding, with who made it and when."""
    found = _with_profiles(lambda profiles: profiles.bindings())
    if not found:
        typer.echo("no bindings: the default profile answers everywhere")
    for b in found:
        extra = f"  switchable: {','.join(b.switchable)}" if b.switchable else ""
        who = printable(b.bound_by) or "(unknown)"
        line = f"{printable(b.target):<40} → {b.profile:<20} {who}, {_when(b.bound_at)}{extra}"
        typer.echo(line)
