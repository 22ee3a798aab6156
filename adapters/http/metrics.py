"""Prometheus metrics of one app: request durations and responses per route, the router's
load and counters, the tool cache's hits and misses, the log streams open now, and each
platform's messages in and out, prompts and outbox backlog (platform_metrics.py).

Each app has its own registry, so that several apps in one process (tests) keep apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Final

import prometheus_client
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from adapters.http.model_metrics import ModelCollector
from adapters.http.platform_metrics import PlatformCollector
from gateway.agents.model_stats import ModelStats
from gateway.agents.tool_cache import ToolCache
from gateway.engine import Router
from gateway.store.outbox import Outbox

DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CONTENT_TYPE: Final = prometheus_client.CONTENT_TYPE_PLAIN_0_0_4

# A `<name>_created` series beside each counter and histogram doubles what a scrape carries,
# for a timestamp nobody here reads.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


class RouterCollector(Collector):
    """The router's gauges and counters, read when scraped."""

    def __init__(self, router: Router) -> None:
        self._router = router

    def collect(self) -> Iterator[Metric]:
        running, queued = self._router.load()
        yield GaugeMetricFamily(
            "agenvoy_tasks_running", "Tasks running now, across sessions.", value=running
        )
        yield GaugeMetricFamily(
            "agenvoy_tasks_queued", "Tasks waiting for their session's turn.", value=queued
        )
        yield GaugeMetricFamily(
            "agenvoy_tasks_waiting",
            "Tasks parked on a confirmation or question.",
            value=len(self._router.pending()),
        )
        for key, value in sorted(self._router.counters.items()):
            yield CounterMetricFamily(f"agenvoy_{key}_total", f"Router counter {key}.", value=value)


class ToolCacheCollector(Collector):
    """Tool cache lookups by tool and result, counted in this process."""

    def __init__(self, cache: ToolCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "agenvoy_tool_cache_lookups",
            "Read-only tool calls looked up in the tool cache, by tool and hit or miss.",
            labels=["tool", "result"],
        )
        for (tool, result), count in sorted(self._cache.lookups.items()):
            family.add_metric([tool, result], count)
        yield family


class HttpMetrics:
    def __init__(
        self,
        router: Router,
        tool_cache: ToolCache | None = None,
        models: ModelStats | None = None,
        outbox: Outbox | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.durations = Histogram(
            "agenvoy_http_request_duration_seconds",
            "Time to answer an HTTP request (a stream counts until it ends).",
            ["method", "route"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.responses = Counter(
            "agenvoy_http_responses",
            "HTTP responses by route, method and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.log_streams = Gauge(
            "agenvoy_http_log_streams",
            "Session log streams open now.",
            registry=self.registry,
        )
        self.registry.register(RouterCollector(router))
        if tool_cache is not None:
            self.registry.register(ToolCacheCollector(tool_cache))
        if models is not None:  # the model targets: chains' and lone agents'
            self.registry.register(ModelCollector(models))
        self.platforms: PlatformCollector | None = None
        if outbox is not None:
            self.platforms = PlatformCollector(router, outbox)
            self.registry.register(self.platforms)

    async def refresh(self) -> None:
        """Read what a scrape shows from the archive (bounded in time, never raising: see
        platform_metrics.py); `exposition` is made on the event loop and reads nothing."""
        if self.platforms is not None:
            await self.platforms.refresh()

    def exposition(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)

    @web.middleware
    async def measure(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = 499  # the request ended before an answer (server shutdown)
            raise
        finally:
            elapsed = time.perf_counter() - started
            route = _route_label(request)
            self.durations.labels(request.method, route).observe(elapsed)
            self.responses.labels(request.method, route, str(status)).inc()


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"
