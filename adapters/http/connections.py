"""Platform connections over HTTP, for gateway admins: which bot token Telegram and Discord
connect with (by reference: env:NAME or file:NAME), or that one is off; a change is applied on
this instance at once and on the others within seconds (gateway/connections.py)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, Final, Literal, TypeVar

from pydantic import Field

from adapters.http.errors import ApiError
from adapters.http.models import RequestBody
from adapters.http.replies import Reply, UnixMs
from adapters.http.route import Call, Route
from gateway.connections import PLATFORMS, ConnectionInvalid, Connections, ConnectionView

T = TypeVar("T")


class ConnectionInfo(Reply):
    platform: str
    source: str = Field(
        description="Where its token comes from now: environment, env:NAME, file:NAME, off, "
        "or not configured."
    )
    token: str = Field(
        description="The configured reference (env:NAME or file:NAME); never a token."
    )
    enabled: bool
    state: str = Field(description="connected, not connected, or why it does not run.")
    changed_by: str
    changed_at: UnixMs


class ConnectionList(Reply):
    connections: list[ConnectionInfo]


class ConnectionChange(RequestBody):
    token: Annotated[str, Field(max_length=140)] = Field(
        description="env:NAME or file:NAME; a value that looks like a token is refused."
    )
    enabled: bool = True


class Reset(Reply):
    reset: Literal[True] = True


async def _admin_connections(call: Call) -> Connections:
    if not await call.ctx.access.is_gateway_admin(call.origin()):
        raise ApiError(403, "forbidden", "only gateway admins manage platform connections")
    return call.ctx.runtime.connections


async def _checked(work: Awaitable[T]) -> T:
    try:
        return await work
    except ConnectionInvalid as exc:
        raise ApiError(400, "bad_request", str(exc)) from None


def _info(view: ConnectionView, state: str) -> ConnectionInfo:
    row = view.configured
    return ConnectionInfo(
        platform=view.platform,
        source=view.wanted.source,
        token=row.token if row else "",
        enabled=row.enabled if row else view.wanted.token is not None,
        state=state,
        changed_by=row.changed_by if row else "",
        changed_at=row.changed_at if row else 0,
    )


def _platform(call: Call) -> str:
    platform = call.request.match_info["platform"]
    if platform not in PLATFORMS:
        raise ApiError(
            404, "not_found", f"no platform {platform[:40]!r}: one of {', '.join(PLATFORMS)}"
        )
    return platform


async def list_connections(call: Call) -> ConnectionList:
    connections = await _admin_connections(call)
    views = await connections.views()
    return ConnectionList(connections=[_info(v, connections.state(v.platform)) for v in views])


async def put_connection(call: Call) -> ConnectionInfo:
    connections = await _admin_connections(call)
    platform = _platform(call)
    body = await call.body(ConnectionChange)
    who = call.origin().sender_key
    await _checked(connections.put(platform, body.token, body.enabled, by=who))
    view = next(v for v in await connections.views() if v.platform == platform)
    return _info(view, connections.state(platform))


async def reset_connection(call: Call) -> Reset:
    connections = await _admin_connections(call)
    platform = _platform(call)
    if not await _checked(connections.reset(platform, by=call.origin().sender_key)):
        raise ApiError(404, "not_found", f"{platform} has no connection configured here")
    return Reset()


CONNECTION = "/v1/connections/{platform}"
CONNECTION_ROUTES: Final[tuple[Route, ...]] = (
    Route("GET", "/v1/connections", list_connections,
          "Platform connections: where each bot token comes from, and their state (gateway admins)",
          caller=True, replies={200: ConnectionList}, errors=(400,)),
    Route("PUT", CONNECTION, put_connection,
          "Connect a platform with the token a reference names, or turn it off (gateway admins)",
          body=ConnectionChange, caller=True, replies={200: ConnectionInfo},
          errors=(400, 404, 413)),
    Route("DELETE", CONNECTION, reset_connection,
          "Forget a platform's connection: the environment's token again (gateway admins)",
          caller=True, replies={200: Reset}, errors=(400, 404)),
)  # fmt: skip
