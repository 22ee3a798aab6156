"""`agenvoy schedule`: every session's schedules, with the suspended ones marked, and
`agenvoy schedule resume N` for the operator. They work on the archive directly; a running
gateway fires a resumed schedule at its next due time."""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gateway.cli_support import fail, printable, with_store

if TYPE_CHECKING:
    from gateway.settings import Settings
    from gateway.store.sessions import SessionStore

T = TypeVar("T")

schedule_app = typer.Typer(
    help="Scheduled prompts of every session; resume those suspended when a token was revoked.",
    invoke_without_command=True,
)


def _run(work: Callable[[SessionStore, Settings], Awaitable[T]]) -> T:
    return with_store(lambda store: work(store, store.settings))


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M") if ms else "-"


@schedule_app.callback()
def listing(
    ctx: typer.Context,
    suspended: Annotated[bool, typer.Option("--suspended", help="Only the suspended.")] = False,
) -> None:
    """List every schedule: number, session, spec, next due time, creator; a suspended one
    says since when and why."""
    if ctx.invoked_subcommand is not None:
        return

    async def work(store: SessionStore, _: Settings) -> list[str]:
        found = await (store.schedules.suspended() if suspended else store.schedules.all())
        lines = []
        for s in found:
            state = f"next {_when(s.next_due_at)}"
            if s.suspended:
                state = f"SUSPENDED since {_when(s.suspended_at)}: {s.suspended_reason}"
            lines.append(
                f"#{s.id}  {s.session_id}  {printable(s.spec)}  by {printable(s.created_by_id)}"
                f"  {state}"
            )
        return lines

    lines = _run(work)
    typer.echo("\n".join(lines) if lines else "no schedules")


@schedule_app.command("resume")
def resume(
    number: Annotated[int, typer.Argument(min=1, max=10**12, help="The schedule's number.")],
    take_over: Annotated[
        bool,
        typer.Option(
            "--take-over",
            help="Resume it although its creator holds no token now: it then acts for you.",
        ),
    ] = False,
) -> None:
    """Let a suspended schedule fire again, from its next due time."""
    from gateway.clock import now_ms
    from gateway.events import Origin
    from gateway.schedule_spec import BadSchedule
    from gateway.schedules import ScheduleNotFound, resume_suspended
    from gateway.store.tokens import TokenStore

    async def work(store: SessionStore, settings: Settings) -> str:
        issued = TokenStore(store.db)
        await issued.import_file(settings.store_dir, at=now_ms())
        valid = {f"http:{t.name}" for t in await issued.load()}
        if settings.api_token is not None and settings.api_token.get_secret_value():
            valid.add("http:api")
        if not valid:
            valid.add("http:anonymous")
        user = getpass.getuser()
        # Whoever can read the home is the gateway's operator, as for the terminal client.
        who = Origin("terminal", sender_id=user, sender_name=user)
        now = int(datetime.now(UTC).timestamp() * 1000)
        try:
            made = await resume_suspended(store.schedules, number, who, valid, now, take_over)
        except (BadSchedule, ScheduleNotFound) as exc:
            fail(str(exc), 1)
        return (
            f"schedule #{made.id} resumed for {made.created_by_id}; next {_when(made.next_due_at)}"
        )

    typer.echo(_run(work))
