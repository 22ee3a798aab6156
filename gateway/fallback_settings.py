"""The fallback and breaker settings of the default agent (gateway/agents/fallback.py
applies them), part of `Settings`."""

from __future__ import annotations

from pydantic import BaseModel, Field


class FallbackSettings(BaseModel):
    # The models the default agent falls back to, in order (gateway/agents/fallback_spec.py):
    # `<agent>[:<model>][@<base url>][;key=<ENV_NAME>]`, comma-separated; empty for none.
    # Checked when the gateway starts (not here: a settings error repeats the value, and a
    # key pasted into it by mistake would end in the output).
    fallback: str = ""
    # A target is skipped after this many provider failures in a row ...
    breaker_failures: int = Field(3, ge=1)
    # ... for this long (or as long as its Retry-After asked), then tried by one task again.
    breaker_cooldown_seconds: float = Field(60.0, gt=0)
