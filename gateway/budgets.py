"""Budgets: what a person (an identity and those linked with it) or a shared chat may spend —
tokens, and US dollars where a price table is set — since 00:00 UTC (a day) and since the 1st
of the month (a month). Held against the `usage` rows, when a message is taken in and again
before each model call of its run (gateway/quotas.py asks).

Money limits are kept in millionths of a dollar: the `quota` table holds whole numbers."""

from __future__ import annotations

import calendar
from collections.abc import Collection, Mapping
from datetime import UTC, datetime

from gateway.engine.errors import QuotaExceeded
from gateway.store.usage import Usage, month_start

DAY_MS = 86_400_000
MICROS = 1_000_000  # a money limit's unit: a millionth of a US dollar
TOKEN_KEYS = ("tokens_day", "tokens_month")
COST_KEYS = ("cost_day", "cost_month")
BUDGET_KEYS = TOKEN_KEYS + COST_KEYS


def day_start(now: int) -> int:
    return now - now % DAY_MS


def next_month(now: int) -> int:
    at = datetime.fromtimestamp(now / 1000, UTC)
    year, month = (at.year + 1, 1) if at.month == 12 else (at.year, at.month + 1)
    return calendar.timegm((year, month, 1, 0, 0, 0)) * 1000


def seconds(ms: int) -> int:
    """Whole seconds, rounded up, at least 1 (a Retry-After)."""
    return max(1, -(-ms // 1000))


def micros(dollars: float) -> int:
    return round(dollars * MICROS)


def dollars(amount_micros: int) -> str:
    return f"${amount_micros / MICROS:,.2f}"


def money(cost: float) -> str:
    """A spend in dollars, with cents, or more digits for what a cent would hide."""
    return f"${cost:,.2f}" if cost >= 0.01 or cost == 0 else f"${cost:.4f}"


async def check_budgets(
    usage: Usage,
    limits: Mapping[str, int],
    now: int,
    whose: str,
    *,
    identities: Collection[str] | None = None,
    session_id: str | None = None,
) -> None:
    """Raise `QuotaExceeded` when the spend of `identities` (or in `session_id`) has reached
    one of the day's or month's budgets in `limits`."""
    for period in ("day", "month"):
        tokens_limit = limits.get(f"tokens_{period}", 0)
        cost_limit = limits.get(f"cost_{period}", 0)
        if not (tokens_limit or cost_limit):
            continue
        start = day_start(now) if period == "day" else month_start(now)
        spent = await usage.spent(since_ms=start, identities=identities, session_id=session_id)
        if tokens_limit and spent.tokens >= tokens_limit:
            amount = f"{tokens_limit:,} tokens"
        elif cost_limit and micros(spent.cost) >= cost_limit:
            amount = dollars(cost_limit)
        else:
            continue
        if period == "day":
            raise QuotaExceeded(
                "budget_exceeded",
                f"{whose}daily budget of {amount} used; resets 00:00 UTC",
                seconds(start + DAY_MS - now),
            )
        reset = next_month(now)
        on = datetime.fromtimestamp(reset / 1000, UTC).strftime("%Y-%m-%d")
        raise QuotaExceeded(
            "budget_exceeded",
            f"{whose}monthly budget of {amount} used; resets {on} 00:00 UTC",
            seconds(reset - now),
        )
