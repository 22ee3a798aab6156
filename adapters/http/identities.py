"""The caller's own identity: who they are (`GET /v1/me`), a one-time code to link another
front-end's identity to them, entering such a code, and leaving the identities they were
linked with (gateway/linking.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from adapters.http.errors import ApiError
from adapters.http.models import RequestBody
from adapters.http.replies import Reply, UnixMs
from adapters.http.route import Call
from gateway.events import Origin
from gateway.linking import CODE_LENGTH, Linking, LinkRefused

_STATUS = {"not_allowed": 403, "bad_code": 400, "too_many": 429, "linked": 409}
_CODE = {
    "not_allowed": "not_allowed",
    "bad_code": "bad_link_code",
    "too_many": "too_many_requests",
    "linked": "conflict",
}


class Me(Reply):
    """Who the caller is, as their credential says."""

    identity: str = Field(description="`platform:sender id`, e.g. `http:alice`.")
    name: str = Field(description="Their display name, when their credential has one.")
    linked: list[str] = Field(description="The other identities linked with this one.")
    gateway_admin: bool = Field(description="Whether they may do everything in the gateway.")


class LinkCode(Reply):
    """A one-time code: entered with `/link CODE` on another front-end (or `POST /v1/me/link`
    by another token), it links that identity to the caller. Shown only now."""

    code: str
    expires_at: UnixMs


class LinkRequest(RequestBody):
    code: Annotated[str, Field(min_length=CODE_LENGTH, max_length=3 * CODE_LENGTH)] = Field(
        description="A code another identity of yours asked for (`/link` alone).",
        examples=["ABCDE-FGH23"],
    )


def _linking(call: Call) -> Linking:
    linking = call.ctx.runtime.linking
    if linking is None:  # every runtime has one; a hand-built one may not
        raise ApiError(404, "not_found", "linking identities is not served here")
    return linking


async def _me(call: Call, who: Origin) -> Me:
    linked = await call.ctx.store.ownership.linked(who.sender_key)
    return Me(
        identity=who.sender_key,
        name=who.sender_name,
        linked=sorted(linked - {who.sender_key}),
        gateway_admin=(await call.ctx.access.caller(who)).gateway_admin,
    )


def _refused(exc: LinkRefused) -> ApiError:
    headers = {}
    if exc.retry_after_ms:
        headers["Retry-After"] = str(-(-exc.retry_after_ms // 1000))
    return ApiError(_STATUS[exc.reason], _CODE[exc.reason], str(exc), headers)


async def get_me(call: Call) -> Me:
    return await _me(call, call.origin())


async def issue_link_code(call: Call) -> LinkCode:
    try:
        issued = await _linking(call).issue(call.origin())
    except LinkRefused as exc:
        raise _refused(exc) from None
    return LinkCode(code=issued.code, expires_at=issued.expires_at)


async def enter_link_code(call: Call) -> Me:
    body = await call.body(LinkRequest)
    who = call.origin()
    try:
        await _linking(call).redeem(who, body.code)
    except LinkRefused as exc:
        raise _refused(exc) from None
    return await _me(call, who)


async def leave_links(call: Call) -> Me:
    who = call.origin()
    await _linking(call).unlink(who)
    return await _me(call, who)
