"""Sharing a private session: its owner names the identities that may read it, or read it and
write in it (gateway/ownership.py). A shared chat is shared by its platform, not here."""

from __future__ import annotations

import re
from typing import Final

from pydantic import Field

from adapters.http.errors import bad
from adapters.http.models import IDENTITY_PATTERN, Query, RequestBody
from adapters.http.paging import NameCursor, limit_field, page_of, read_cursor
from adapters.http.replies import NextCursor, Reply
from adapters.http.route import Call
from gateway.ownership import ShareMode, is_shared

_IDENTITY_RE: Final = re.compile(IDENTITY_PATTERN)


class ShareRequest(RequestBody):
    mode: ShareMode = Field(description="read: see it; write: see it and send messages in it.")


class Share(Reply):
    identity: str
    mode: ShareMode


class Shares(Reply):
    """The identities the session is shared with, besides its owner, by identity (after a
    change: the first page)."""

    owner: str = Field(description="The identity that made the session.")
    shares: list[Share]
    next_cursor: NextCursor = None


class SharesQuery(Query):
    limit: int = limit_field(100, 500)
    cursor: NameCursor | None = None


def identity_of(call: Call) -> str:
    """The `{identity}` of the route's path, checked."""
    identity = call.request.match_info["identity"]
    if _IDENTITY_RE.fullmatch(identity) is None:
        bad("an identity is platform:sender id, e.g. http:ann or telegram:1234")
    return identity


def _private(session_id: str) -> None:
    if is_shared(session_id):
        bad("a shared chat is shared with its members by its platform")


async def _listing(call: Call, query: SharesQuery | None = None) -> Shares:
    query = query or SharesQuery()
    after = read_cursor(query.cursor, str)
    row = await call.ctx.store.get(call.session_id)
    owner = row.owner if row is not None else ""
    shares = await call.ctx.store.share_page(
        call.session_id, query.limit + 1, after="" if after is None else str(after[0])
    )
    listed = [Share(identity=i, mode=m) for i, m in shares]
    shown, next_cursor = page_of(listed, query.limit, lambda s: (s.identity,))
    return Shares(owner=owner, shares=shown, next_cursor=next_cursor)


async def list_shares(call: Call) -> Shares:
    return await _listing(call, call.query(SharesQuery))


async def put_share(call: Call) -> Shares:
    _private(call.session_id)
    identity = identity_of(call)
    body = await call.body(ShareRequest)
    await call.ctx.store.ownership.share(call.session_id, identity, body.mode)
    return await _listing(call)


async def delete_share(call: Call) -> Shares:
    _private(call.session_id)
    await call.ctx.store.ownership.unshare(call.session_id, identity_of(call))
    return await _listing(call)
