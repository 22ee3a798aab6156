"""Sharing a private session: its owner names the identities that may read it, or read it and
write in it (gateway/ownership.py). A shared chat is shared by its platform, not here."""

from __future__ import annotations

import re
from typing import Final

from pydantic import Field

from adapters.http.errors import bad
from adapters.http.models import IDENTITY_PATTERN, RequestBody
from adapters.http.replies import Reply
from adapters.http.route import Call
from gateway.ownership import ShareMode, is_shared

_IDENTITY_RE: Final = re.compile(IDENTITY_PATTERN)


class ShareRequest(RequestBody):
    mode: ShareMode = Field(description="read: see it; write: see it and send messages in it.")


class Share(Reply):
    identity: str
    mode: ShareMode


class Shares(Reply):
    """The identities the session is shared with, besides its owner."""

    owner: str = Field(description="The identity that made the session.")
    shares: list[Share]


def _identity(call: Call) -> str:
    identity = call.request.match_info["identity"]
    if _IDENTITY_RE.fullmatch(identity) is None:
        bad("an identity is platform:sender id, e.g. http:ann or telegram:1234")
    return identity


def _private(session_id: str) -> None:
    if is_shared(session_id):
        bad("a shared chat is shared with its members by its platform")


async def _listing(call: Call) -> Shares:
    row = await call.ctx.store.get(call.session_id)
    owner = row.owner if row is not None else ""
    shares = await call.ctx.store.ownership.shares(call.session_id)
    listed = [Share(identity=i, mode=m) for i, m in sorted(shares.items())]
    return Shares(owner=owner, shares=listed)


async def list_shares(call: Call) -> Shares:
    return await _listing(call)


async def put_share(call: Call) -> Shares:
    _private(call.session_id)
    identity = _identity(call)
    body = await call.body(ShareRequest)
    await call.ctx.store.ownership.share(call.session_id, identity, body.mode)
    return await _listing(call)


async def delete_share(call: Call) -> Shares:
    _private(call.session_id)
    await call.ctx.store.ownership.unshare(call.session_id, _identity(call))
    return await _listing(call)
