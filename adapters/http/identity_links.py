"""Linking a person's identities over HTTP, for gateway admins: which identities are one
person (one budget, one data set), joining two and parting one, as `agenvoy identity` does;
each change is in the log of changes and can be reverted (gateway/config_log.py)."""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from adapters.http.errors import ApiError, bad
from adapters.http.models import IDENTITY_PATTERN, RequestBody
from adapters.http.replies import Reply
from adapters.http.route import Call, Route
from adapters.http.shares import identity_of
from gateway.store.ownership import Ownership


class Person(Reply):
    identity: str
    linked: list[str] = Field(description="The other identities of the same person.")


class LinkRequest(RequestBody):
    to: Annotated[str, Field(pattern=IDENTITY_PATTERN, max_length=200)] = Field(
        description="An identity of the person to join: platform:sender id."
    )


async def _admin_ownership(call: Call) -> Ownership:
    if not await call.ctx.access.is_gateway_admin(call.origin()):
        raise ApiError(403, "forbidden", "only gateway admins link others' identities")
    return call.ctx.store.ownership


def _person(identity: str, identities: frozenset[str]) -> Person:
    return Person(identity=identity, linked=sorted(identities - {identity}))


async def get_person(call: Call) -> Person:
    ownership = await _admin_ownership(call)
    identity = identity_of(call)
    return _person(identity, await ownership.linked(identity))


async def link_identity(call: Call) -> Person:
    """Join the identity, with whatever it is linked with, to the person of `to`."""
    ownership = await _admin_ownership(call)
    identity = identity_of(call)
    body = await call.body(LinkRequest)
    if body.to == identity:
        bad("an identity is linked with itself already")
    joined = await ownership.link(identity, body.to, by=call.origin().sender_key)
    return _person(identity, joined)


async def unlink_identity(call: Call) -> Person:
    ownership = await _admin_ownership(call)
    identity = identity_of(call)
    if not await ownership.unlink(identity, by=call.origin().sender_key):
        raise ApiError(404, "not_found", f"{identity} is linked with nobody")
    return _person(identity, frozenset({identity}))


PERSON = "/v1/identities/{identity}"
IDENTITY_ROUTES: Final[tuple[Route, ...]] = (
    Route("GET", PERSON, get_person,
          "The identities linked with one: one person, one budget, one data set (gateway admins)",
          caller=True, replies={200: Person}, errors=(400,)),
    Route("PUT", f"{PERSON}/person", link_identity,
          "Link an identity with another's person, as a logged change (gateway admins)",
          body=LinkRequest, caller=True, replies={200: Person}, errors=(400, 413)),
    Route("DELETE", f"{PERSON}/person", unlink_identity,
          "Take an identity out of its person, as a logged change (gateway admins)",
          caller=True, replies={200: Person}, errors=(400, 404)),
)  # fmt: skip
