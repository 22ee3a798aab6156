"""For whoever runs the gateway: liveness, Prometheus metrics, and the OpenAPI document."""

from __future__ import annotations

from aiohttp import web

from adapters.http.metrics import CONTENT_TYPE
from adapters.http.replies import Health, OpenApiDocument
from adapters.http.route import Call


async def healthz(call: Call) -> Health:
    return Health()


async def metrics(call: Call) -> web.Response:
    response = web.Response(body=call.ctx.metrics.exposition())
    # aiohttp refuses a content_type with parameters, so the header is set whole.
    response.headers["Content-Type"] = CONTENT_TYPE
    return response


async def openapi(call: Call) -> OpenApiDocument:
    return call.ctx.openapi_document()
