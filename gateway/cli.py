"""The `agenvoy` command: inspect sessions, search the archive, check an installation."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from itertools import groupby
from typing import Annotated, TypeVar

import typer
from pydantic import ValidationError

from gateway.clock import now_ms
from gateway.ids import InvalidSessionId, Prefix, prefix_of, validate_session_id
from gateway.logs import configure_logging
from gateway.settings import Settings
from gateway.store.db import Database, DatabaseError
from gateway.store.kv import open_kv
from gateway.store.search import search_messages
from gateway.store.sessions import SessionStore, UnknownSession
from gateway.store.usage import DAY_MS, usage_summary

app = typer.Typer(
    help="agenvoy-gateway: one agent runtime behind Discord, Telegram, HTTP and a terminal.",
    no_args_is_help=True,
    add_completion=False,
)

T = TypeVar("T")


def _settings() -> Settings:
    try:
        settings = Settings()
    except ValidationError as exc:
        typer.secho(f"invalid settings:\n{exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    configure_logging(
        "WARNING" if settings.log_level == "INFO" else settings.log_level, settings.log_format
    )
    return settings


def _with_store(work: Callable[[SessionStore], Awaitable[T]]) -> T:
    settings = _settings()

    async def main() -> T:
        store = await SessionStore.open(settings)
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except InvalidSessionId as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2) from exc
    except UnknownSession as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(1) from exc
    except DatabaseError as exc:
        typer.secho(f"database: {exc}", fg="red", err=True)
        raise typer.Exit(1) from exc


def _when(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")


def _checked_id(value: str) -> str:
    try:
        return validate_session_id(value)
    except InvalidSessionId as exc:
        raise typer.BadParameter(str(exc)) from exc


@app.command()
def sessions() -> None:
    """List sessions grouped by prefix, with name, last activity and message count."""
    infos = _with_store(lambda store: store.list_sessions())
    if not infos:
        typer.echo("no sessions yet")
        return
    order = {p: i for i, p in enumerate(Prefix)}
    infos.sort(key=lambda s: (order[prefix_of(s.id)], -s.updated_at))
    for prefix, group in groupby(infos, key=lambda s: prefix_of(s.id)):
        typer.secho(f"{prefix}-*", bold=True)
        for info in group:
            typer.echo(
                f"  {info.id:<48} {info.name or '-':<20} {_when(info.updated_at):<17} "
                f"{info.message_count:>6} msgs"
            )


@app.command()
def show(
    session_id: Annotated[str, typer.Argument(callback=_checked_id, metavar="SID")],
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
            typer.echo(f"  {label + ':':<15}{value or '-'}")
        typer.echo("")
        for m in messages:
            who = f"{m.role}" + (f" ({m.sender})" if m.sender else "")
            typer.echo(f"[{_when(m.send_at)}] {who}: {m.content}")

    _with_store(work)


@app.command()
def search(
    query: str,
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="Only this session.", metavar="SID")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 20,
    offset: Annotated[int, typer.Option(min=0)] = 0,
) -> None:
    """Full-text search of the message archive, newest first."""
    if session is not None:
        _checked_id(session)
    hits = _with_store(
        lambda store: search_messages(
            store.db, query, session_id=session, limit=limit, offset=offset
        )
    )
    if not hits:
        typer.echo("no matches")
        return
    for hit in hits:
        who = hit.sender or hit.role
        typer.echo(f"{hit.session_id}  #{hit.id}  [{_when(hit.send_at)}] {who}: {hit.content}")


@app.command()
def usage(
    days: Annotated[int, typer.Option(min=1, max=3650, help="Look back this many days.")] = 28,
) -> None:
    """Token spend per model, with output tokens per second."""
    since = now_ms() - days * DAY_MS
    rows = _with_store(lambda store: usage_summary(store.db, since_ms=since))
    if not rows:
        typer.echo(f"no usage in the last {days} days")
        return
    typer.echo(
        f"{'model':<32}{'calls':>7}{'input':>12}{'output':>12}{'cache r':>10}{'cache w':>10}"
        f"{'out tok/s':>11}"
    )
    for u in rows:
        typer.echo(
            f"{u.model:<32}{u.calls:>7}{u.input:>12}{u.output:>12}{u.cache_read:>10}"
            f"{u.cache_write:>10}{u.output_tps:>11.1f}"
        )


@app.command()
def doctor() -> None:
    """Print the resolved settings (secrets masked) and check the home and the database."""
    settings = _settings()
    typer.secho("settings", bold=True)
    for key, value in settings.masked().items():
        typer.echo(f"  {key:<26}{value}")
    ok = True
    try:
        settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.NamedTemporaryFile(dir=settings.home, prefix=".doctor-"):
            pass
        typer.secho(f"ok    home {settings.home} is writable", fg="green")
    except OSError as exc:
        ok = False
        typer.secho(f"FAIL  home {settings.home} is not writable: {exc}", fg="red")

    async def check_db() -> str | None:
        db = await Database.open(settings.resolved_database_url)
        try:
            return await db.current_revision()
        finally:
            await db.close()

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
        revision = asyncio.run(check_db())
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
    if not ok:
        raise typer.Exit(1)
    typer.echo("all checks passed")


if __name__ == "__main__":
    app()
