"""`agenvoy quota set|show` (the operator's overrides of the quota settings, per identity or
per chat) and `agenvoy usage --by identity` (spend per member). They open the archive
directly; a running gateway reads overrides at each message, so a change holds at once."""

from __future__ import annotations

import getpass
from typing import Annotated, TypeVar

import typer

from gateway.cli_support import load_settings, printable, with_store

T = TypeVar("T")

quota_app = typer.Typer(
    help="Quota and budget overrides per identity (platform:id) or shared chat (dc-/tg- id).",
    no_args_is_help=True,
)


def parse_changes(subject: str, pairs: list[str]) -> dict[str, int | None]:
    """`key=value` pairs for `subject`: a whole number (dollars for `cost_*`), or `default`
    to take one away; checked as every front-end checks them (gateway/quota_changes.py)."""
    from gateway.quota_changes import QuotaInvalid, checked, keys_for

    try:
        known = keys_for(subject)
        changes: dict[str, str | float | int | None] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or key not in known:
                raise QuotaInvalid(pair, f"expected KEY=N with KEY one of {', '.join(known)}")
            if value == "default":
                changes[key] = None
            elif key.startswith("cost_"):
                changes[key] = value  # dollars, read by `checked`
            elif value.isascii() and value.isdigit() and len(value) <= 15:
                changes[key] = int(value)
            else:
                raise QuotaInvalid(pair, "the value is a whole number or `default`")
        return checked(subject, changes)
    except QuotaInvalid as exc:
        raise typer.BadParameter(str(exc)) from None


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
