"""Rolling back a logged configuration change, the same for the HTTP API, the console and the
CLI: a quota change puts the overrides it replaced back, a binding change the binding (or its
absence), a token's issue revokes that token. Each is a new change in the log that names the
one it reverts; a link change puts the identity back with the person it was part of before
(or alone). A revocation is not rolled back: a token once revoked may have leaked, and its
holder gets a new one instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.quota_changes import in_dollars
from gateway.store.config_changes import ConfigChange, ConfigChanges, NotRevertible
from gateway.store.connections import ConnectionStore
from gateway.store.db import Database
from gateway.store.ownership import Ownership
from gateway.store.profiles import ProfileStore
from gateway.store.quotas import Quotas


@dataclass(frozen=True, slots=True)
class Reverted:
    kind: str
    subject: str
    now: dict[str, Any] | None  # what the subject has now, as people read it (None: nothing)


async def revert(db: Database, change_id: int, *, by: str, at: int) -> Reverted:
    """Roll back change `change_id`; UnknownChange when there is none, NotRevertible for one
    that is not rolled back."""
    change = await ConfigChanges(db).get(change_id)
    if change.kind == "token":
        return await _revert_token(db, change, by=by, at=at)
    if change.kind == "connection":
        kept = await ConnectionStore(db).revert(change_id, by=by, at=at)
        shown = None if kept is None else {"token": kept.token, "enabled": kept.enabled}
        return Reverted("connection", change.subject, shown)
    if change.kind == "link":
        linked = await Ownership(db).revert_link(change_id, by=by)
        shown = {"linked": sorted(linked)} if len(linked) > 1 else None
        return Reverted("link", change.subject, shown)
    if change.kind == "quota":
        subject, limits = await Quotas(db).revert(change_id, by=by)
        return Reverted("quota", subject, in_dollars(limits) if limits else None)
    binding = await ProfileStore(db).revert_binding(change_id, by=by, at=at)
    if binding is None:
        return Reverted("binding", change.subject, None)
    now = {"profile": binding.profile, "switchable": list(binding.switchable)}
    return Reverted("binding", change.subject, now)


async def _revert_token(db: Database, change: ConfigChange, *, by: str, at: int) -> Reverted:
    from gateway.store.tokens import TokenStore  # the token rows import the credentials

    if change.after is None:
        raise NotRevertible(
            f"change {change.id} revoked a token, which is not brought back: "
            f"issue {change.subject} a new one (agenvoy token add)"
        )
    tokens = TokenStore(db)
    current = {t.name: t for t in await tokens.load()}.get(change.subject)
    if current is None or current.digest[:12] != change.after.get("sha256_prefix"):
        raise NotRevertible(f"the token change {change.id} made is not the one held now")
    await tokens.revoke(change.subject, by=by, at=at, reverts=change.id)
    return Reverted("token", change.subject, None)
