"""The `agenvoy` command: inspect sessions, search the archive, check an installation."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from itertools import groupby
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from adapters.http_client import GatewayClient, GatewayError, GatewayUnavailable
from adapters.terminal.launch import GatewayNotRunning, api_token, ensure_gateway, gateway_url
from gateway.clock import now_ms
from gateway.ids import InvalidSessionId, Prefix, prefix_of, validate_session_id
from gateway.jobs import Reaper
from gateway.logs import configure_logging
from gateway.runtime import Runtime, UnknownAgent
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


def _settings(*, quiet: bool = True) -> Settings:
    try:
        settings = Settings()
    except ValidationError as exc:
        typer.secho(f"invalid settings:\n{exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    # One-shot commands keep their output clean; `run` logs at the configured level.
    level = "WARNING" if quiet and settings.log_level == "INFO" else settings.log_level
    configure_logging(level, settings.log_format)
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


@app.command()
def run() -> None:
    """Start the gateway: the HTTP API, the agent and the background jobs, until Ctrl+C."""
    from gateway.app import serve

    settings = _settings(quiet=False)
    try:
        asyncio.run(serve(settings))
    except OSError as exc:
        typer.secho(f"cannot start: {exc}", fg="red", err=True)
        raise typer.Exit(1) from exc
    except (UnknownAgent, DatabaseError) as exc:
        typer.secho(f"cannot start: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    except Exception as exc:
        from adapters.http import InsecureBinding

        if isinstance(exc, InsecureBinding):
            typer.secho(f"cannot start: {exc}", fg="red", err=True)
            raise typer.Exit(2) from exc
        raise


def _client_call(work: Callable[[GatewayClient], Awaitable[T]]) -> T:
    settings = _settings()

    async def main() -> T:
        async with GatewayClient(gateway_url(settings), api_token(settings)) as client:
            return await work(client)

    try:
        return asyncio.run(main())
    except GatewayUnavailable as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(1) from exc
    except GatewayError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(1) from exc


@app.command()
def chat(
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", metavar="SID", help="The session to open."),
    ] = None,
    start: Annotated[
        bool, typer.Option("--start", help="Start the gateway in the background if it is down.")
    ] = False,
) -> None:
    """Open the full-screen chat window on a session of the running gateway.

    Without --session it opens the session used last, or a new cli-* one.
    """
    from adapters.terminal.app import ChatApp, ChatConfig

    if session is not None:
        _checked_id(session)
    settings = _settings()
    try:
        started = asyncio.run(ensure_gateway(settings, start=start))
    except (GatewayNotRunning, TimeoutError) as exc:
        message = str(exc) or "the gateway did not come up in time; see its log"
        typer.secho(message, fg="red", err=True)
        raise typer.Exit(1) from exc
    if started is not None:
        typer.echo(
            f"started the gateway in the background (pid {started.pid}, log: {started.log_file})"
        )
    config = ChatConfig(
        base_url=gateway_url(settings),
        token=api_token(settings),
        session_id=session,
        state_file=settings.home / "terminal.json",
        windows_dir=settings.home / "windows",
    )
    window = ChatApp(config)
    window.run()
    if window.return_code:
        raise typer.Exit(window.return_code)


def _ask_in_terminal(prompt: dict[str, Any]) -> dict[str, Any] | None:
    if not sys.stdin.isatty():
        return None
    if prompt.get("kind") == "confirm":
        question = f"Allow {prompt.get('tool')} {json.dumps(prompt.get('args', {}))}?"
        return {"approve": typer.confirm(question, default=False)}
    return {"answer": typer.prompt(prompt.get("question") or "Answer")}


@app.command()
def send(
    text: str,
    session: Annotated[str | None, typer.Option("--session", "-s", metavar="SID")] = None,
    persist: Annotated[bool, typer.Option(help="Keep the session (chat-*), not temp-*.")] = False,
    wait: Annotated[float, typer.Option(min=1, max=300, help="Seconds to wait.")] = 120,
) -> None:
    """Send a message to the running gateway and print the reply."""
    if session is not None:
        _checked_id(session)

    async def work(client: GatewayClient) -> int:
        reply = await client.send(text, session_id=session, persist=persist, wait=wait)
        body = reply.body
        while reply.status == 202 and body.get("pending"):
            prompt = body["pending"]
            answer = _ask_in_terminal(prompt)
            if answer is None:
                typer.echo(
                    f"waiting for an answer: agenvoy approve|deny {body['session_id']} "
                    f"{body['task_hash']}"
                )
                return 3
            await client.answer(
                body["session_id"],
                body["task_hash"],
                approve=answer.get("approve"),
                text=answer.get("answer"),
            )
            reply = await client.task(body["session_id"], body["task_hash"], wait)
            body = reply.body
        if "command" in body:
            typer.echo(body.get("text", ""))
            return 0 if body.get("ok", True) else 1
        if body.get("status") == "done":
            typer.echo(body.get("text", ""))
            return 0
        if body.get("error"):
            typer.secho(body["error"], fg="red", err=True)
            return 1
        typer.echo(f"still running: {body.get('session_id')} {body.get('task_hash')}")
        return 3

    code = _client_call(work)
    if code:
        raise typer.Exit(code)


@app.command()
def pending(
    session: Annotated[str | None, typer.Option("--session", "-s", metavar="SID")] = None,
) -> None:
    """Confirmations and questions waiting for an answer."""
    if session is not None:
        _checked_id(session)
    prompts = _client_call(lambda client: client.pending(session))
    if not prompts:
        typer.echo("nothing is waiting")
        return
    for p in prompts:
        what = (
            f"confirm {p.get('tool')} {json.dumps(p.get('args', {}))}"
            if p.get("kind") == "confirm"
            else f"question: {p.get('question')}"
        )
        typer.echo(f"{p['session_id']}  {p['task_hash']}  {what}")


def _answer(session_id: str, task_hash: str, approve: bool) -> None:
    reply = _client_call(lambda client: client.answer(session_id, task_hash, approve=approve))
    typer.echo(f"{'approved' if approve else 'denied'} (by {reply.body.get('by', '?')})")


@app.command()
def approve(
    session_id: Annotated[str, typer.Argument(callback=_checked_id, metavar="SID")],
    task_hash: str,
) -> None:
    """Approve a waiting confirmation."""
    _answer(session_id, task_hash, True)


@app.command()
def deny(
    session_id: Annotated[str, typer.Argument(callback=_checked_id, metavar="SID")],
    task_hash: str,
) -> None:
    """Deny a waiting confirmation."""
    _answer(session_id, task_hash, False)


@app.command()
def cleanup() -> None:
    """Reap idle temp-* sessions now (the running gateway also does this on a timer)."""
    settings = _settings()

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
            return await reaper.run_once()
        finally:
            await runtime.close()

    reaped = asyncio.run(main())
    typer.echo(f"reaped {len(reaped)} idle temp session(s)" + "".join(f"\n  {s}" for s in reaped))


if __name__ == "__main__":
    app()
