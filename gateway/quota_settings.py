"""The quota and budget settings (gateway/quotas.py applies them), part of `Settings`.

Each is 0 for none. A person is an identity with those linked to it: they share these limits.
Overrides per identity or per chat live in the archive (`agenvoy quota set`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator


class QuotaSettings(BaseModel):
    quota_messages_per_minute: int = Field(0, ge=0)
    quota_sessions: int = Field(0, ge=0)  # cli-/chat- sessions owned (temp- do not count)
    quota_tokens_day: int = Field(0, ge=0)  # input + output tokens since 00:00 UTC
    quota_tokens_month: int = Field(0, ge=0)  # since the 1st of the month, 00:00 UTC
    # US dollars by the price table (AGENVOY_PRICES), the same day and month.
    quota_cost_day: float = Field(0, ge=0, allow_inf_nan=False)
    quota_cost_month: float = Field(0, ge=0, allow_inf_nan=False)
    # The same for a shared chat (dc-*, tg-*) as a whole, whoever writes in it.
    chat_quota_messages_per_minute: int = Field(0, ge=0)
    chat_quota_tokens_day: int = Field(0, ge=0)
    chat_quota_tokens_month: int = Field(0, ge=0)
    chat_quota_cost_day: float = Field(0, ge=0, allow_inf_nan=False)
    chat_quota_cost_month: float = Field(0, ge=0, allow_inf_nan=False)
    # A TOML or JSON file: model name or glob → US dollars per million input, output,
    # cache_read and cache_write tokens (gateway/prices.py). Unset: usage has no cost.
    prices: Path | None = None
    # Gateway admins (AGENVOY_ADMINS) are held to none of the quotas above (task counts
    # still apply to them).
    quota_admins_exempt: bool = True

    @field_validator("prices", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value
