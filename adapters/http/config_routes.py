"""Live configuration over HTTP, for gateway admins: the quota overrides (read and changed,
applied from the next message on every instance), the per-user API tokens (issued, listed,
revoked: every instance follows within a second) and the log of configuration changes — who
changed a quota, a binding or a token, when, from what to what — with a change rolled back.
Profiles keep their own versions (adapters/http/profiles.py)."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import Field

from adapters.http.errors import ApiError
from adapters.http.models import Query, RequestBody
from adapters.http.paging import IdCursor, encode_cursor, limit_field, read_cursor
from adapters.http.replies import Reply, UnixMs
from adapters.http.route import Call, Route
from gateway.config_log import revert
from gateway.credentials import TokenRefused, new_token
from gateway.quota_changes import QuotaInvalid, checked
from gateway.quota_changes import in_dollars as shown
from gateway.quotas import defaults
from gateway.store.config_changes import (
    KINDS,
    ConfigChange,
    ConfigChanges,
    NotRevertible,
    UnknownChange,
)
from gateway.store.quotas import Quotas
from gateway.store.tokens import TokenStore

Limits = dict[str, int | float]
SUBJECT = Field(
    min_length=1,
    max_length=200,
    description="An identity (`platform:id`, e.g. `http:ann`) or a shared chat (`dc-`/`tg-` id).",
)


class QuotaList(Reply):
    identity_defaults: Limits = Field(description="A person's limits from the settings.")
    chat_defaults: Limits = Field(description="A shared chat's limits from the settings.")
    overrides: dict[str, Limits] = Field(description="Each subject's own limits.")


class QuotaInfo(Reply):
    subject: str
    limits: Limits = Field(description="Its own limits now; the others are the defaults.")


class QuotaChange(RequestBody):
    limits: Annotated[
        dict[Annotated[str, Field(max_length=40)], float | None], Field(min_length=1, max_length=16)
    ] = Field(
        description="Limits to set: a whole number (0: none), dollars for `cost_day` and "
        "`cost_month`, or null to go back to the default.",
        examples=[{"messages_per_minute": 10, "cost_day": 2.5, "tokens_month": None}],
    )


class ChangesQuery(Query):
    kind: Annotated[str, Field(pattern=f"^({'|'.join(KINDS)})?$")] = ""
    subject: Annotated[str, Field(max_length=250)] = ""
    limit: int = limit_field(50, 500)
    cursor: IdCursor = ""


class ChangeInfo(Reply):
    id: int
    kind: str = Field(
        description="`quota`, `binding`, `token` or `link`; a link's before and after are "
        "`{linked: [identities]}`."
    )
    subject: str = Field(description="The identity or chat; a binding's `KIND:KEY`.")
    before: dict[str, Any] | None = Field(description="What it had (null: nothing).")
    after: dict[str, Any] | None = Field(description="What it got (null: removed).")
    changed_by: str
    changed_at: UnixMs
    reverts: int | None = Field(description="The change this one rolled back.")


class ChangeList(Reply):
    changes: list[ChangeInfo]
    next_cursor: str | None


class TokenInfo(Reply):
    identity: str = Field(description="Who the token stands for: `http:NAME`.")
    display: str


class TokenList(Reply):
    tokens: list[TokenInfo]


class TokenRequest(RequestBody):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="The sender id (http:NAME).")
    display: Annotated[str, Field(max_length=64)] = ""


class IssuedTokenReply(TokenInfo):
    token: str = Field(description="The token: shown only now, only its hash is kept.")


class Revoked(Reply):
    revoked: Literal[True] = True


class Reverted(Reply):
    subject: str
    now: dict[str, Any] | None = Field(description="What the subject has now (null: nothing).")


async def _admin(call: Call) -> None:
    if not await call.ctx.access.is_gateway_admin(call.origin()):
        raise ApiError(403, "forbidden", "only gateway admins change the configuration")


def _whole(value: float | None) -> str | float | int | None:
    # JSON has one kind of number: 10 and 10.0 are the same whole number; 2.5 stays a
    # fraction (refused by `checked` unless it is money).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


async def list_quotas(call: Call) -> QuotaList:
    await _admin(call)
    person, chat = defaults(call.ctx.settings)
    overrides = await Quotas(call.ctx.store.db).all()
    return QuotaList(
        identity_defaults=shown(person),
        chat_defaults=shown(chat),
        overrides={subject: shown(limits) for subject, limits in overrides.items()},
    )


async def set_quota(call: Call) -> QuotaInfo:
    await _admin(call)
    subject = call.request.match_info["subject"]
    body = await call.body(QuotaChange)
    try:
        changes = checked(subject, {k: _whole(v) for k, v in body.limits.items()})
    except QuotaInvalid as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    now = await Quotas(call.ctx.store.db).set(subject, changes, by=call.origin().sender_key)
    return QuotaInfo(subject=subject, limits=shown(now))


def _info(change: ConfigChange) -> ChangeInfo:
    def money(value: Any) -> Any:
        return shown(value) if change.kind == "quota" and isinstance(value, dict) else value

    return ChangeInfo(
        id=change.id,
        kind=change.kind,
        subject=change.subject,
        before=money(change.before),
        after=money(change.after),
        changed_by=change.changed_by,
        changed_at=change.changed_at,
        reverts=change.reverts,
    )


async def list_changes(call: Call) -> ChangeList:
    await _admin(call)
    query = call.query(ChangesQuery)
    after = read_cursor(query.cursor or None, int)
    found = await ConfigChanges(call.ctx.store.db).page(
        kind=query.kind or None,
        subject=query.subject or None,
        limit=query.limit + 1,
        before_id=int(after[0]) if after else None,
    )
    page = found[: query.limit]
    more = len(found) > query.limit
    return ChangeList(
        changes=[_info(c) for c in page],
        next_cursor=encode_cursor(page[-1].id) if more else None,
    )


async def revert_change(call: Call) -> Reverted:
    await _admin(call)
    raw = call.request.match_info["change"]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ApiError(400, "bad_request", "change: a change's number")
    runtime = call.ctx.runtime
    try:
        done = await revert(
            runtime.store.db, int(raw), by=call.origin().sender_key, at=runtime.clock.now_ms()
        )
    except UnknownChange as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except NotRevertible as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    if done.kind == "binding" and runtime.profiles is not None:
        runtime.profiles.changed()
    if done.kind == "connection":
        runtime.connections.changed()
    return Reverted(subject=done.subject, now=done.now)


async def list_tokens(call: Call) -> TokenList:
    await _admin(call)
    issued = await TokenStore(call.ctx.store.db).load()
    return TokenList(
        tokens=[TokenInfo(identity=f"http:{t.name}", display=t.display) for t in issued]
    )


async def issue_token(call: Call) -> IssuedTokenReply:
    await _admin(call)
    body = await call.body(TokenRequest)
    runtime = call.ctx.runtime
    try:
        token, issued = new_token(body.name, body.display)
        await TokenStore(runtime.store.db).issue(
            issued, by=call.origin().sender_key, at=runtime.clock.now_ms()
        )
    except TokenRefused as exc:
        raise ApiError(409 if "already" in str(exc) else 400, "bad_request", str(exc)) from None
    return IssuedTokenReply(identity=f"http:{issued.name}", display=issued.display, token=token)


async def revoke_token(call: Call) -> Revoked:
    await _admin(call)
    name = call.request.match_info["name"]
    runtime = call.ctx.runtime
    tokens = TokenStore(runtime.store.db)
    if not await tokens.revoke(name, by=call.origin().sender_key, at=runtime.clock.now_ms()):
        raise ApiError(404, "not_found", f"no token for {name[:64]!r}")
    return Revoked()


QUOTA = "/v1/quotas/{subject}"
CONFIG_ROUTES: Final[tuple[Route, ...]] = (
    Route("GET", "/v1/quotas", list_quotas,
          "Quota and budget defaults and every override (gateway admins)",
          caller=True, replies={200: QuotaList}, errors=(400,)),
    Route("PUT", QUOTA, set_quota,
          "Change an identity's or a shared chat's own limits, from its next message on "
          "(gateway admins)",
          body=QuotaChange, caller=True, replies={200: QuotaInfo}, errors=(400, 413)),
    Route("GET", "/v1/tokens", list_tokens, "Who holds an API token (gateway admins)",
          caller=True, replies={200: TokenList}, errors=(400,)),
    Route("POST", "/v1/tokens", issue_token,
          "Issue an API token, shown once; every instance accepts it within a second "
          "(gateway admins)",
          body=TokenRequest, caller=True, replies={201: IssuedTokenReply},
          errors=(400, 409, 413)),
    Route("DELETE", "/v1/tokens/{name}", revoke_token,
          "Revoke an API token: every instance refuses it, ends its streams and suspends its "
          "schedules within a second (gateway admins)",
          caller=True, replies={200: Revoked}, errors=(400, 404)),
    Route("GET", "/v1/changes", list_changes,
          "Changes of quotas, bindings and tokens: who, when, from what to what, newest first "
          "(gateway admins)",
          query=ChangesQuery, caller=True, replies={200: ChangeList}, errors=(400,)),
    Route("POST", "/v1/changes/{change}/revert", revert_change,
          "Put back what a change replaced, as a new change (gateway admins)",
          caller=True, replies={200: Reverted}, errors=(400, 404, 409)),
)  # fmt: skip
