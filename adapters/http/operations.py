"""For whoever runs the gateway: readiness, Prometheus metrics, and the OpenAPI document."""

from __future__ import annotations

from typing import Literal

from aiohttp import web
from pydantic import Field

from adapters.http.metrics import CONTENT_TYPE
from adapters.http.replies import ErrorDetail, OpenApiDocument, Reply
from adapters.http.route import Call
from gateway.health import CheckState


class HealthChecks(Reply):
    """Each part this instance needs, as it answered within the check timeout (2 s): `ok`,
    `unreachable` (it failed), `timeout` (no answer in time) or `full` (no room to write)."""

    database: CheckState = Field(description="Whether the SQL archive answers a trivial query")
    kv: CheckState = Field(description="Whether the KV store answers")
    leases: CheckState = Field(description="Whether the leases can be renewed")


class PlatformHealth(Reply):
    """A chat platform (down: tried again with backoff; the instance serves on, still ready)."""

    state: Literal["connected", "down"]
    reason: str = Field("", description="Why it is down: the error of the last attempt")
    since: int = Field(description="Unix ms since which it has been in this state")


class Health(Reply):
    """Ready: the archive, the KV store and the leases answer."""

    status: Literal["ok"] = "ok"
    checks: HealthChecks
    platforms: dict[str, PlatformHealth] = {}  # by name: "telegram", "discord"


class HealthUnavailable(Reply):
    """Not ready: the checks that are not `ok` name what this instance cannot reach; `error`
    says it too, in the shape every error of the API has."""

    status: Literal["unavailable", "degraded"] = "unavailable"  # degraded: storage full
    checks: HealthChecks
    platforms: dict[str, PlatformHealth] = {}  # by name: "telegram", "discord"
    error: ErrorDetail


async def healthz(call: Call) -> Health | HealthUnavailable:
    """200 when this instance can serve: its SQL archive answers a trivial query, its KV store
    answers, and its leases can be renewed. 503 otherwise, naming the part that failed or did
    not answer in time; each check waits 2 s at most, so a load balancer always gets an answer.
    `platforms` says whether each chat platform is connected (one down leaves the status as is)."""
    runtime = call.ctx.runtime
    ready = await runtime.readiness()
    checks = HealthChecks(database=ready.database, kv=ready.kv, leases=ready.leases)
    platforms = {
        name: PlatformHealth(
            state="connected" if state.connected else "down",
            reason=state.reason,
            since=state.since_ms,
        )
        for name, state in runtime.platforms.states().items()
    }
    if ready.ready:
        return Health(checks=checks, platforms=platforms)
    failing = ", ".join(f"{name} {state}" for name, state in checks if state != "ok")
    if all(state in ("ok", "full") for _, state in checks):
        # It answers, but cannot store: out of rotation until space is freed.
        error = ErrorDetail(code="storage_full", message=f"degraded: {failing}")
        return HealthUnavailable(status="degraded", checks=checks, platforms=platforms, error=error)
    error = ErrorDetail(code="unavailable", message=f"not ready: {failing}")
    return HealthUnavailable(checks=checks, platforms=platforms, error=error)


async def metrics(call: Call) -> web.Response:
    await call.ctx.metrics.refresh()
    response = web.Response(body=call.ctx.metrics.exposition())
    # aiohttp refuses a content_type with parameters, so the header is set whole.
    response.headers["Content-Type"] = CONTENT_TYPE
    return response


async def openapi(call: Call) -> OpenApiDocument:
    return call.ctx.openapi_document()
