"""The caller's own data: `GET /v1/me/export` and `POST /v1/me/forget`. Whose data it is
comes from the caller's credential (a token issued to them, a local terminal user), never
from anything the request names; linked identities count as the same member."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from adapters.http.errors import ApiError
from adapters.http.models import RequestBody
from adapters.http.replies import Reply, UnixMs
from adapters.http.route import Call
from gateway.member_data.service import MemberData, NotAMember, canceler


class MemberExport(Reply):
    """Everything stored about the caller, as one document."""

    format: str
    identity: str = Field(description="The caller, `platform:sender id`.")
    identities: list[str] = Field(description="Every identity linked with the caller's.")
    exported_at: UnixMs
    messages: list[dict[str, Any]] = Field(description="What they wrote, in every session.")
    replies: list[dict[str, Any]] = Field(description="The agent's messages in their tasks.")
    usage: list[dict[str, Any]]
    schedules: list[dict[str, Any]]
    sessions_owned: list[dict[str, Any]]
    shared_with_them: list[dict[str, Any]]
    links: list[dict[str, Any]]
    bans: list[dict[str, Any]]
    quotas: list[dict[str, Any]]
    memories: list[dict[str, Any]] = Field(
        description="What they asked the bot to remember (/remember, or agreed to its tool)."
    )


class ForgetRequest(RequestBody):
    confirm: Literal[True] = Field(
        description="Must be true: the erasure cannot be undone.", examples=[True]
    )


class Forgotten(Reply):
    """What the erasure took: counts only."""

    identity: str
    identities: list[str]
    counts: dict[str, int]


def _member(call: Call) -> MemberData:
    return MemberData(call.ctx.store, canceler(call.ctx.router), call.ctx.runtime.tool_memory)


def _refused(exc: NotAMember) -> ApiError:
    return ApiError(403, "not_a_member", str(exc))


async def export_me(call: Call) -> MemberExport:
    who = call.origin().sender_key
    try:
        document = await _member(call).export(who)
    except NotAMember as exc:
        raise _refused(exc) from exc
    return MemberExport.model_validate(document)


async def forget_me(call: Call) -> Forgotten:
    await call.body(ForgetRequest)
    who = call.origin().sender_key
    try:
        done = await _member(call).forget(who, by=who)
    except NotAMember as exc:
        raise _refused(exc) from exc
    return Forgotten(identity=done.identity, identities=list(done.identities), counts=done.counts())
