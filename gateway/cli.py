"""The `agenvoy` command, the composition root of the gateway process.

The commands here are the gateway's own: `run` starts it, `doctor` and `cleanup` work on its
installation, and the archive readers (`sessions`, `show`, `search`, `usage`) open the store
directly. The commands that are clients of a running gateway live with the terminal front-end
(`adapters.terminal.commands`) and are registered here.

Each command imports what it needs when it runs: `agenvoy --help` or `agenvoy send` load no
database driver, agent or store.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from itertools import groupby
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

import typer

from adapters.setup_checks import LiveChecks
from adapters.terminal.commands import register as register_client_commands
from gateway.cli_bans import ban, bans, unban
from gateway.cli_changes import changes_app
from gateway.cli_connections import connection_app
from gateway.cli_identity import identity_app
from gateway.cli_knowledge import knowledge_app
from gateway.cli_members import register as register_member_commands
from gateway.cli_memory import reindex, semantic_search
from gateway.cli_profiles import bind, bindings, profile_app, unbind
from gateway.cli_quotas import quota_app, usage_by_identity
from gateway.cli_schedules import schedule_app
from gateway.cli_setup import register as register_setup
from gateway.cli_support import checked_id, fail, load_settings, printable, with_store
from gateway.cli_tokens import token_app
from gateway.ids import InvalidSessionId, Prefix, prefix_of

if TYPE_CHECKING:
    from gateway.store.sessions import SessionInfo, SessionStore

app = typer.Typer(
    help="agenvoy-gateway: one agent runtime behind Discord, Telegram, HTTP and a terminal.",
    no_args_is_help=True,
    add_completion=False,
)

T = TypeVar("T")
UsageBy = Literal["model", "identity"]

# Lines of a message after its first, in `show`: never at the start of a line of our own.
BODY_INDENT = "    "


def _with_store(work: Callable[[SessionStore], Awaitable[T]]) -> T:
    """`with_store`, with a session id the archive does not know (or that is not one) said."""
    from gateway.store.sessions import UnknownSession

    try:
        return with_store(work)
    except InvalidSessionId as exc:
        fail(str(exc), 2)
    except UnknownSession as exc:
        fail(str(exc), 1)


def _when(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")


def sessions() -> None:
    """List sessions grouped by prefix, with name, last activity, message count and how many
    schedules each has."""

    async def work(store: SessionStore) -> tuple[list[SessionInfo], dict[str, int]]:
        return await store.list_sessions(), await store.schedules.counts()

    infos, scheduled = _with_store(work)
    if not infos:
        typer.echo("no sessions yet")
        return
    order = {p: i for i, p in enumerate(Prefix)}
    infos.sort(key=lambda s: (order[prefix_of(s.id)], -s.updated_at))
    # A subagent's session is listed under the session whose task started it.
    listed = {info.id for info in infos}
    children: dict[str, list[SessionInfo]] = {}
    for info in infos:
        if info.parent in listed:
            children.setdefault(info.parent, []).append(info)
    tops = [info for info in infos if info.parent not in listed]

    def line(info: SessionInfo, depth: int) -> None:
        sid = ("  " * depth + ("↳ " if depth else "") + info.id).ljust(48)
        typer.echo(
            f"  {sid} {printable(info.name or '-'):<20} {_when(info.updated_at):<17} "
            f"{info.message_count:>6} msgs"
            + (f"  {scheduled[info.id]} scheduled" if info.id in scheduled else "")
        )
        for child in children.get(info.id, ()):
            line(child, depth + 1)

    for prefix, group in groupby(tops, key=lambda s: prefix_of(s.id)):
        typer.secho(f"{prefix}-*", bold=True)
        for info in group:
            line(info, 0)


def show(
    session_id: Annotated[str, typer.Argument(callback=checked_id, metavar="SID")],
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many messages.")] = 20,
) -> None:
    """A session's settings and its last messages."""

    async def work(store: SessionStore) -> None:
        row = await store.require(session_id)
        messages = await store.recent_messages(session_id, limit)
        typer.secho(row.id, bold=True)
        for label, value in [
            ("name", row.name),
            ("persona", row.persona),
            ("model", row.model),
            ("reasoning", row.reasoning),
            ("created", _when(row.created_at)),
            ("last activity", _when(row.updated_at)),
        ]:
            typer.echo(f"  {label + ':':<15}{printable(value or '-')}")
        typer.echo("")
        for m in messages:
            who = printable(m.role + (f" ({m.sender})" if m.sender else ""))
            typer.echo(f"[{_when(m.send_at)}] {who}: {printable(m.content, body=BODY_INDENT)}")

    _with_store(work)


def search(
    query: str,
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="Only this session.", metavar="SID")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 20,
    offset: Annotated[int, typer.Option(min=0)] = 0,
    semantic: Annotated[
        bool,
        typer.Option(
            "--semantic",
            help="By meaning: in --session, or across the most recently active sessions.",
        ),
    ] = False,
) -> None:
    """Full-text search of the message archive, newest first (or, with --semantic, the
    messages closest in meaning, best first: of one session, or across sessions)."""
    if session is not None:
        checked_id(session)
    if semantic:
        semantic_search(query, session, limit)
        return
    hits = _with_store(
        lambda store: store.search.messages(query, session_id=session, limit=limit, offset=offset)
    )
    if not hits:
        typer.echo("no matches")
        return
    for hit in hits:
        who = printable(hit.sender or hit.role)
        typer.echo(
            f"{hit.session_id}  #{hit.id}  [{_when(hit.send_at)}] {who}: {printable(hit.content)}"
        )


def usage(
    days: Annotated[int, typer.Option(min=1, max=3650, help="Look back this many days.")] = 28,
    by: Annotated[UsageBy, typer.Option(help="Per model, or per identity (member).")] = "model",
) -> None:
    """Token spend per model, with output tokens per second; or per identity."""
    from gateway.clock import now_ms
    from gateway.store.usage import DAY_MS

    if by == "identity":
        usage_by_identity(days)
        return

    since = now_ms() - days * DAY_MS
    rows = _with_store(lambda store: store.usage.summary(since_ms=since))
    if not rows:
        typer.echo(f"no usage in the last {days} days")
        return
    typer.echo(
        f"{'model':<32}{'calls':>7}{'input':>12}{'output':>12}{'cache r':>10}{'cache w':>10}"
        f"{'out tok/s':>11}"
    )
    for u in rows:
        typer.echo(
            f"{printable(u.model):<32}{u.calls:>7}{u.input:>12}{u.output:>12}{u.cache_read:>10}"
            f"{u.cache_write:>10}{u.output_tps:>11.1f}"
        )


def doctor() -> None:
    """Print the resolved settings (secrets masked) and check the home and the database."""
    from gateway.memory.embedders import open_embedder
    from gateway.store.db import migrated_revision
    from gateway.store.kv import open_kv

    settings = load_settings()
    typer.secho("settings", bold=True)
    # crash_at is for the crash tests alone: listed only when set, which it never should be.
    shown = {k: v for k, v in settings.masked().items() if k != "crash_at" or v}
    width = max(map(len, shown)) + 2
    for key, value in shown.items():
        typer.echo(f"  {key:<{width}}{value}")
    ok = True
    if settings.crash_at:
        typer.secho("WARN  crash_at is set: the gateway kills itself at that step", fg="red")
    try:
        settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.NamedTemporaryFile(dir=settings.home, prefix=".doctor-"):
            pass
        typer.secho(f"ok    home {settings.home} is writable", fg="green")
    except OSError as exc:
        ok = False
        typer.secho(f"FAIL  home {settings.home} is not writable: {exc}", fg="red")

    async def check_kv() -> None:
        kv = await open_kv(settings.resolved_kv_url)
        try:
            await kv.set("doctor:probe", "1", ttl=5)
            if await kv.get("doctor:probe") != "1":
                raise RuntimeError("a value written could not be read back")
            await kv.delete("doctor:probe")
        finally:
            await kv.close()

    try:
        revision = asyncio.run(migrated_revision(settings.resolved_database_url))
        typer.secho(f"ok    database migrated to revision {revision}", fg="green")
    except Exception as exc:  # any failure here is what doctor exists to report
        ok = False
        typer.secho(f"FAIL  database: {type(exc).__name__}: {exc}", fg="red")
    try:
        asyncio.run(check_kv())
        typer.secho("ok    KV store reads and writes", fg="green")
    except Exception as exc:  # reported, like the database check
        ok = False
        typer.secho(f"FAIL  KV store: {type(exc).__name__}: {exc}", fg="red")
    # Which embedder recall uses, named (opening it reads no model and makes no request).
    typer.echo(f"info  recall embedder: {open_embedder(settings).label}")
    if not ok:
        raise typer.Exit(1)
    typer.echo("all checks passed")


def run() -> None:
    """Start the gateway: the HTTP API, the agent and the background jobs, until Ctrl+C."""
    from adapters.http import InsecureBinding
    from gateway.app import serve
    from gateway.home_lock import HomeInUse
    from gateway.logs import get_logger, hide_secrets, redact
    from gateway.prices import PriceTableError
    from gateway.runtime import UnknownAgent
    from gateway.store.db import DatabaseError

    settings = load_settings(quiet=False)
    hide_secrets(settings)
    try:
        asyncio.run(serve(settings))
    except OSError as exc:
        fail(f"cannot start: {redact(str(exc))}", 1)
    except (UnknownAgent, DatabaseError, InsecureBinding, HomeInUse, PriceTableError) as exc:
        fail(f"cannot start: {redact(str(exc))}", 2)
    except Exception:
        # Anything else goes to the log, where secrets are masked: a library's error can quote
        # one (python-telegram-bot puts a rejected bot token in its message).
        get_logger(__name__).exception("the gateway stopped on an unexpected error")
        raise typer.Exit(1) from None


def cleanup() -> None:
    """Reap idle temp-* sessions now (the running gateway also does this on a timer)."""
    from gateway.jobs import Reaper
    from gateway.logs import hide_secrets
    from gateway.runtime import Runtime

    settings = load_settings()
    hide_secrets(settings)

    async def main() -> list[str]:
        runtime = await Runtime.start(settings)
        try:
            reaper = Reaper(
                runtime.store,
                runtime.kv,
                runtime.presence,
                runtime.router,
                settings.temp_idle_seconds,
            )
            reaped = await reaper.run_once()
            await runtime.store.trash.settled()  # a one-shot command gives the disk space back
            return reaped
        finally:
            await runtime.close()

    reaped = asyncio.run(main())
    typer.echo(f"reaped {len(reaped)} idle temp session(s)" + "".join(f"\n  {s}" for s in reaped))


# In the order `agenvoy --help` lists them.
register_setup(app, LiveChecks())
for _command in (sessions, show, search, usage, doctor, run):
    app.command()(_command)
register_client_commands(app)
app.command()(cleanup)
app.command()(reindex)
app.add_typer(knowledge_app, name="knowledge")
app.add_typer(connection_app, name="connection")
register_member_commands(app)
app.add_typer(token_app, name="token")
app.add_typer(identity_app, name="identity")
app.add_typer(schedule_app, name="schedule")
app.add_typer(quota_app, name="quota")
app.add_typer(changes_app, name="changes")
app.add_typer(profile_app, name="profile")
app.command()(bind)
app.command()(unbind)
app.command()(bindings)
app.command()(ban)
app.command()(unban)
app.command()(bans)


if __name__ == "__main__":
    app()
