"""Per-platform metrics: messages in (taken, refused by reason), messages out (sent, failed
deliveries), 429s from a platform's API, open prompts, and the outbox backlog.

Labels are platform names and fixed words only — never a chat's, user's, session's or task's
id. The counts and open prompts are this process's (sum them over instances). The backlog is
read from the outbox table, which every instance shares: each instance shows the same whole
archive's numbers (take the max over instances, not the sum).

A collector's `collect` is synchronous, and the scrape runs on the event loop: the backlog is
read through the store's async face in `refresh`, awaited before the exposition is made, for
at most `timeout` seconds. A read that fails or takes longer leaves the backlog out of that
scrape (`agenvoy_platform_outbox_up` 0) while everything else is served as usual.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.clock import now_ms
from gateway.engine import Router
from gateway.logs import get_logger
from gateway.store.outbox import Backlog, Outbox

log = get_logger(__name__)

# As long as a readiness check waits for the archive: a scrape is answered within it.
BACKLOG_TIMEOUT: Final = 2.0


class PlatformCollector(Collector):
    def __init__(self, router: Router, outbox: Outbox, timeout: float = BACKLOG_TIMEOUT) -> None:
        self._router = router
        self._outbox = outbox
        self.timeout = timeout
        self._backlog: list[Backlog] | None = None  # None: the last read failed
        # Scrapes that come together share one read, rather than each adding one of its own
        # to a database that may be slow already.
        self._reading: asyncio.Task[list[Backlog]] | None = None

    async def refresh(self) -> None:
        """Read the backlog for the next `collect`; never raises (a failed read is shown)."""
        if self._reading is None or self._reading.done():
            self._reading = asyncio.create_task(self._outbox.backlog(), name="metrics:backlog")
            # A read that ends after its scrape gave up has its error taken here (logged below
            # for the scrape that waited), not reported as never retrieved.
            self._reading.add_done_callback(_retrieved)
        try:
            # Shielded: a scrape that gives up leaves the read for the next one to pick up.
            self._backlog = await asyncio.wait_for(asyncio.shield(self._reading), self.timeout)
        except Exception as exc:  # the archive away, or slow: the rest of /metrics still served
            self._backlog = None
            log.warning("outbox backlog not read for /metrics", error=repr(exc))

    def collect(self) -> Iterator[Metric]:
        traffic = self._router.traffic
        yield _counter(
            "agenvoy_platform_messages_in",
            "Messages the router took in, by platform and what each became (task, command,"
            " context).",
            "kind",
            traffic.received,
        )
        yield _counter(
            "agenvoy_platform_messages_refused",
            "Messages the router turned away, by platform and reason.",
            "reason",
            traffic.refused,
        )
        yield _counter(
            "agenvoy_platform_messages_out",
            "Replies, prompts, errors, notices and other events delivered, by platform and kind.",
            "kind",
            traffic.sent,
        )
        yield _counter(
            "agenvoy_platform_delivery_failures",
            "Failed deliveries by platform and outcome (retried, refused, expired, lost).",
            "outcome",
            traffic.failed,
        )
        throttled = CounterMetricFamily(
            "agenvoy_platform_rate_limited",
            "429 answers from a platform's API, where its adapter reports them.",
            labels=["platform"],
        )
        for platform, count in sorted(traffic.rate_limited.items()):
            throttled.add_metric([platform], count)
        yield throttled
        prompts = GaugeMetricFamily(
            "agenvoy_platform_prompts_open",
            "Confirmations and questions waiting for an answer, by the platform asked.",
            labels=["platform"],
        )
        waiting = Counter(traffic.platform(p.origin.platform) for p in self._router.pending())
        for platform, count in sorted(waiting.items()):
            prompts.add_metric([platform], count)
        yield prompts
        yield from self._backlog_metrics(traffic.platform)

    def _backlog_metrics(self, label: Callable[[str], str]) -> Iterator[Metric]:
        backlog = self._backlog
        yield GaugeMetricFamily(
            "agenvoy_platform_outbox_up",
            "1 when this scrape read the outbox backlog, 0 when the archive did not answer.",
            value=0 if backlog is None else 1,
        )
        if backlog is None:
            return
        # Summed per label: rows of odd platform strings all count as `other` (one series).
        pending: Counter[str] = Counter()
        retrying: Counter[str] = Counter()
        oldest: dict[str, int] = {}
        for row in backlog:
            name = label(row.platform)
            pending[name] += row.pending
            retrying[name] += row.retrying
            oldest[name] = min(oldest.get(name, row.oldest_at), row.oldest_at)
        now = now_ms()  # the wall clock the outbox stamps `created_at` with
        families = (
            GaugeMetricFamily(
                "agenvoy_platform_outbox_pending",
                "Outbox entries waiting to be delivered, by platform (the shared archive's).",
                labels=["platform"],
            ),
            GaugeMetricFamily(
                "agenvoy_platform_outbox_retrying",
                "Of those, entries that failed at least once and wait for their next try.",
                labels=["platform"],
            ),
            GaugeMetricFamily(
                "agenvoy_platform_outbox_oldest_seconds",
                "Age of the oldest entry waiting to be delivered, by platform.",
                labels=["platform"],
            ),
        )
        for name in sorted(pending):
            families[0].add_metric([name], pending[name])
            families[1].add_metric([name], retrying[name])
            families[2].add_metric([name], max(0, now - oldest[name]) / 1000)
        yield from families


def _retrieved(task: asyncio.Task[list[Backlog]]) -> None:
    if not task.cancelled():
        task.exception()


def _counter(
    name: str, doc: str, label: str, counts: Counter[tuple[str, str]]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=["platform", label])
    for (platform, what), count in sorted(counts.items()):
        family.add_metric([platform, what], count)
    return family
