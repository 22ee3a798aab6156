"""For whoever runs the gateway: readiness, Prometheus metrics, and the OpenAPI document."""

from __future__ import annotations

from aiohttp import web

from adapters.http.metrics import CONTENT_TYPE
from adapters.http.replies import (
    ErrorDetail,
    Health,
    HealthChecks,
    HealthUnavailable,
    OpenApiDocument,
    PlatformHealth,
)
from adapters.http.route import Call


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
    response = web.Response(body=call.ctx.metrics.exposition())
    # aiohttp refuses a content_type with parameters, so the header is set whole.
    response.headers["Content-Type"] = CONTENT_TYPE
    return response


async def openapi(call: Call) -> OpenApiDocument:
    return call.ctx.openapi_document()
