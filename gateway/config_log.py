"""Rolling back a logged configuration change, the same for the HTTP API, the console and the
CLI: a quota change puts the overrides it replaced back, a binding change the binding (or its
absence). Either is a new change in the log that names the one it reverts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.quota_changes import in_dollars
from gateway.store.config_changes import ConfigChanges
from gateway.store.db import Database
from gateway.store.profiles import ProfileStore
from gateway.store.quotas import Quotas


@dataclass(frozen=True, slots=True)
class Reverted:
    kind: str
    subject: str
    now: dict[str, Any] | None  # what the subject has now, as people read it (None: nothing)


async def revert(db: Database, change_id: int, *, by: str, at: int) -> Reverted:
    """Roll back change `change_id`; UnknownChange when there is none."""
    change = await ConfigChanges(db).get(change_id)
    if change.kind == "quota":
        subject, limits = await Quotas(db).revert(change_id, by=by)
        return Reverted("quota", subject, in_dollars(limits) if limits else None)
    binding = await ProfileStore(db).revert_binding(change_id, by=by, at=at)
    if binding is None:
        return Reverted("binding", change.subject, None)
    now = {"profile": binding.profile, "switchable": list(binding.switchable)}
    return Reverted("binding", change.subject, now)
