"""`agenvoy changes list|revert`: the log of live configuration changes (quota overrides, agent
bindings and API tokens: who, when, from what to what), and a change rolled back. They open the
archive directly; every running instance applies a rollback from its next message or task."""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from gateway.cli_support import fail, printable, with_store

changes_app = typer.Typer(
    help="Changes of quotas, bindings and tokens, newest first, and rolling one back.",
    no_args_is_help=True,
)


def _value(value: Any, kind: str = "binding") -> str:
    from gateway.quota_changes import in_dollars

    if value is None:
        return "(none)"
    return json.dumps(in_dollars(value) if kind == "quota" else value, sort_keys=True)


@changes_app.command("list")
def changes_list(
    kind: Annotated[str | None, typer.Option(help="quota, binding or token")] = None,
    subject: Annotated[str | None, typer.Option(help="Only this identity, chat or target")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 20,
) -> None:
    """The newest changes: number, when, who, what it changed, before → after."""
    from gateway.store.config_changes import KINDS, ConfigChanges

    if kind is not None and kind not in KINDS:
        raise typer.BadParameter(f"{kind!r}: one of {', '.join(KINDS)}", param_hint="--kind")
    found = with_store(
        lambda store: ConfigChanges(store.db).page(kind=kind, subject=subject, limit=limit)
    )
    if not found:
        typer.echo("no changes")
        return
    for change in found:
        when = datetime.fromtimestamp(change.changed_at / 1000, UTC).strftime("%Y-%m-%d %H:%M")
        undo = f" (reverts {change.reverts})" if change.reverts else ""
        typer.echo(
            printable(
                f"{change.id:>5}  {when}  {change.changed_by}  {change.kind} {change.subject}: "
                f"{_value(change.before, change.kind)} → {_value(change.after, change.kind)}{undo}"
            )
        )


@changes_app.command("revert")
def changes_revert(
    change: Annotated[int, typer.Argument(min=1, help="The change's number (changes list)")],
) -> None:
    """Put back what CHANGE replaced, as a new change."""
    from gateway.clock import now_ms
    from gateway.config_log import revert
    from gateway.store.config_changes import NotRevertible, UnknownChange

    by = f"terminal:{getpass.getuser()}"
    try:
        done = with_store(lambda store: revert(store.db, change, by=by, at=now_ms()))
    except (UnknownChange, NotRevertible) as exc:
        fail(str(exc), 1)
    typer.echo(printable(f"{done.subject}: now {_value(done.now)}"))
