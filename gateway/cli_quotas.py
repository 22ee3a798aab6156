"""`agenvoy quota set|show` (the operator's overrides of the quota settings, per identity or
per chat) and `agenvoy usage --by identity` (spend per member). They open the archive
directly; a running gateway reads overrides at each message, so a change holds at once."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gateway.cli_support import load_settings, printable, with_store

if TYPE_CHECKING:
    pass

T = TypeVar("T")

quota_app = typer.Typer(
    help="Quota and budget overrides per identity (platform:id) or shared chat (dc-/tg- id).",
    no_args_is_help=True,
)


def _dollars(pair: str, value: str) -> int:
    """A money limit (`2.50`, `$2.50`) in millionths of a dollar, as the quota table keeps it."""
    from decimal import Decimal, InvalidOperation

    from gateway.budgets import MICROS

    try:
        amount = Decimal(value.removeprefix("$"))
    except InvalidOperation:
        amount = Decimal(-1)
    if not amount.is_finite() or amount < 0 or amount > 10**9:
        raise typer.BadParameter(f"{pair!r}: the value is an amount of dollars, or `default`")
    return int(amount * MICROS)


def parse_changes(subject: str, pairs: list[str]) -> dict[str, int | None]:
    """`key=value` pairs for `subject`: a whole number (dollars for `cost_*`), or `default`
    to take one away."""
    from gateway.budgets import COST_KEYS
    from gateway.ids import InvalidSessionId, validate_session_id
    from gateway.quotas import CHAT_KEYS, PERSON_KEYS

    if subject.startswith(("dc-", "tg-")):
        try:
            validate_session_id(subject)
        except InvalidSessionId as exc:
            raise typer.BadParameter(str(exc)) from None
        known: tuple[str, ...] = CHAT_KEYS
    elif ":" in subject.strip(":"):
        known = PERSON_KEYS
    else:
        raise typer.BadParameter(
            f"{subject!r} is neither an identity (platform:id) nor a shared chat (dc-/tg- id)"
        )
    changes: dict[str, int | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in known:
            raise typer.BadParameter(f"{pair!r}: expected KEY=N with KEY one of {', '.join(known)}")
        if value == "default":
            changes[key] = None
        elif key in COST_KEYS:
            changes[key] = _dollars(pair, value)
        elif value.isascii() and value.isdigit() and len(value) <= 15:
            changes[key] = int(value)
        else:
            raise typer.BadParameter(f"{pair!r}: the value is a whole number or `default`")
    if not changes:
        raise typer.BadParameter("give at least one KEY=N")
    return changes


def _shown(limits: dict[str, int]) -> str:
    from gateway.budgets import COST_KEYS, MICROS

    def value(key: str, amount: int) -> str:
        return f"{amount / MICROS:.2f}" if key in COST_KEYS else str(amount)

    return " ".join(f"{k}={value(k, v)}" for k, v in sorted(limits.items())) or "(defaults)"


@quota_app.command("set")
def quota_set(
    subject: Annotated[str, typer.Argument(help="platform:id, or a dc-/tg- chat id")],
    pairs: Annotated[list[str], typer.Argument(help="KEY=N (0: no limit; default: unset)")],
) -> None:
    """Set SUBJECT's own limits over the settings' defaults."""
    from gateway.store.quotas import Quotas

    changes = parse_changes(subject, pairs)
    by = f"terminal:{getpass.getuser()}"
    now = with_store(lambda store: Quotas(store.db).set(subject, changes, by=by))
    typer.echo(f"{printable(subject)}: {_shown(now)}")


@quota_app.command("show")
def quota_show(
    subject: Annotated[str | None, typer.Argument(help="Only this one")] = None,
) -> None:
    """The defaults from the settings and every override set."""
    from gateway.quotas import defaults
    from gateway.store.quotas import Quotas

    person, chat = defaults(load_settings())
    overrides = with_store(lambda store: Quotas(store.db).all())
    if subject is None:
        typer.echo(f"default (identity): {_shown(person)}")
        typer.echo(f"default (chat): {_shown(chat)}")
    for each, limits in overrides.items():
        if subject is None or each == subject:
            typer.echo(f"{printable(each)}: {_shown(limits)}")


def usage_by_identity(days: int) -> None:
    """Token spend per identity over the last `days` days, the biggest first."""
    from gateway.clock import now_ms
    from gateway.store.usage import DAY_MS

    since = now_ms() - days * DAY_MS
    priced = load_settings().prices is not None
    rows = with_store(lambda store: store.usage.by_identity(since_ms=since))
    if not rows:
        typer.echo(f"no usage in the last {days} days")
        return
    cost = f"{'cost $':>12}" if priced else ""
    typer.echo(f"{'identity':<40}{'calls':>7}{'input':>12}{'output':>12}{cost}")
    for u in rows:
        who = printable(u.identity) or "(unknown)"
        cost = f"{u.cost or 0.0:>12.4f}" if priced else ""
        typer.echo(f"{who:<40}{u.calls:>7}{u.input:>12}{u.output:>12}{cost}")
