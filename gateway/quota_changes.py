"""What a change of quota overrides may be, checked the same way whoever makes it (the CLI,
the HTTP API, the console): the subject is an identity (`platform:id`) or a shared chat
(`dc-`/`tg-` id); each key is one its kind has; each value is a whole number (dollars for
`cost_*`, kept in millionths), or None to go back to the default. A refusal names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from gateway.budgets import COST_KEYS, MICROS
from gateway.ids import InvalidSessionId, validate_session_id
from gateway.quotas import CHAT_KEYS, PERSON_KEYS

# Larger than any limit anyone means, small enough for every backend's BIGINT.
_MOST = 10**15
_MOST_DOLLARS = Decimal(10**9)


class QuotaInvalid(ValueError):
    """A refused quota change; the message starts with the field it is about."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


def keys_for(subject: str) -> tuple[str, ...]:
    """The limits `subject` can have its own of."""
    if subject.startswith(("dc-", "tg-")):
        try:
            validate_session_id(subject)
        except InvalidSessionId as exc:
            raise QuotaInvalid("subject", str(exc)) from None
        return CHAT_KEYS
    if ":" in subject.strip(":") and len(subject) <= 200 and subject.isprintable():
        return PERSON_KEYS
    raise QuotaInvalid(
        "subject", "neither an identity (platform:id) nor a shared chat (dc-/tg- id)"
    )


def dollars(field: str, value: str | float | int) -> int:
    """A money limit (`2.50`, `$2.50`, 2.5) in millionths of a dollar."""
    try:
        amount = Decimal(str(value).removeprefix("$"))
    except InvalidOperation:
        amount = Decimal(-1)
    if not amount.is_finite() or amount < 0 or amount > _MOST_DOLLARS:
        raise QuotaInvalid(field, "an amount of dollars from 0 to 1,000,000,000")
    return int(amount * MICROS)


def checked(subject: str, changes: Mapping[str, str | float | int | None]) -> dict[str, int | None]:
    """`changes` as the quota table keeps them, or QuotaInvalid naming the first bad field.
    Money may be given as text (`$2.50`, from a command line or a form)."""
    known = keys_for(subject)
    if not changes:
        raise QuotaInvalid("limits", "give at least one limit to change")
    kept: dict[str, int | None] = {}
    for key, value in changes.items():
        if key not in known:
            raise QuotaInvalid(key, f"not a limit of this subject (one of {', '.join(known)})")
        if value is None:
            kept[key] = None
        elif key in COST_KEYS:
            kept[key] = dollars(key, value)
        elif isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MOST:
            raise QuotaInvalid(key, "a whole number from 0 (no limit) up, or null for the default")
        else:
            kept[key] = value
    return kept


def in_dollars(limits: Mapping[str, int]) -> dict[str, int | float]:
    """Limits as people read them: money in dollars, the rest as kept."""
    return {k: (v / MICROS if k in COST_KEYS else v) for k, v in sorted(limits.items())}
