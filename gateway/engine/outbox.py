"""Once-only delivery: every reply and prompt goes out through the outbox.

An entry is recorded (gateway.store.outbox) before it is handed to the adapter, and marked
delivered with the platform's message id when the adapter returns. A failed hand-off is
retried with backoff; one that keeps failing is marked failed, logged and written to the
session's action.log — never dropped silently. After a restart, entries still pending are
delivered; delivered ones are never sent again.

A reply the platform takes in several parts records each accepted part with its entry
(`Progress`), so a restart between parts goes on from the next one. The one window left is a
crash after the platform accepted a part and before it was recorded: that part is sent again
on restart. Adapters close it where the platform allows (Discord's `enforce_nonce`, keyed by
the task and part).

With several instances, an entry is sent only by the instance that claimed it
(`claimant`): two instances that both see it pending (a redelivery pass, a task taken over)
send it once. A claim left by an instance that died lapses after `claim_seconds`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from tenacity import AsyncRetrying, stop_after_attempt, wait_exponential_jitter

from gateway.adapter import Progress, Sink
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.events import Origin, event_from_obj
from gateway.logs import get_logger
from gateway.store.actionlog import ActionKind
from gateway.store.errors import until_available
from gateway.store.outbox import Outbox, OutboxItem, Parts

log = get_logger(__name__)

OUTBOX_KINDS = frozenset({"text", "confirm", "ask_user", "error"})
SENT_KEPT = 4096  # entries remembered as sent by this process


class Courier:
    def __init__(
        self,
        outbox: Outbox,
        sinks: Mapping[str, Sink],
        log_action: Callable[[str, str, str, str], Awaitable[object]],
        *,
        clock: Clock = SYSTEM_CLOCK,
        attempts: int = 5,
        initial_wait: float = 0.5,
        max_wait: float = 30.0,
        claimant: str | None = None,
        claim_seconds: float = 30.0,
    ) -> None:
        self.outbox = outbox
        self.sinks = sinks
        self._log_action = log_action
        self.clock = clock
        self.attempts = attempts
        self.initial_wait = initial_wait
        self.max_wait = max_wait
        self.claimant = claimant
        self.claim_seconds = claim_seconds
        # Entries this process is sending, and those it sent lately (bounded): a pass over
        # the pending ones (`redeliver`) lists an entry its own task may be sending, or have
        # sent since the list was read. Claims (`take`) settle that between instances only.
        self._sending: set[int] = set()
        self._sent: dict[int, None] = {}

    async def send(self, item: OutboxItem) -> bool:
        """Deliver `item` unless it already was; True once it is delivered."""
        if item.status == "delivered" or item.id in self._sent:
            return True
        if item.id in self._sending:
            return False  # on its way already, from here
        self._sending.add(item.id)
        try:
            delivered = await self._send(item)
        finally:
            self._sending.discard(item.id)
        if delivered:
            self._sent[item.id] = None
            if len(self._sent) > SENT_KEPT:
                del self._sent[next(iter(self._sent))]
        return delivered

    async def _send(self, item: OutboxItem) -> bool:
        sink = self.sinks.get(item.platform)
        if sink is None:
            # No adapter for that platform in this process: it stays pending for one that has.
            log.info("outbox entry waits for its adapter", platform=item.platform, id=item.id)
            return False
        if self.claimant is not None:
            claimed = await self.outbox.take(item.id, self.claimant, int(self.claim_seconds * 1000))
            if claimed is None:
                log.info("outbox entry sent by another instance", id=item.id)
                return False
            item = claimed
        origin = Origin.from_json(item.payload["origin"])
        event = event_from_obj(item.payload["event"])

        parts = PartsRecord(self.outbox, item.id, item.parts_sent)
        progress = Progress(item.parts_sent, item.parts_attempted, parts.save)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            # Jitter in proportion to the first wait, so a short backoff stays short.
            wait=wait_exponential_jitter(
                multiplier=self.initial_wait, max=self.max_wait, jitter=self.initial_wait
            ),
            sleep=self.clock.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    try:
                        message_id = await sink.deliver(origin, event, progress)
                    except Exception as exc:
                        final = attempt.retry_state.attempt_number >= self.attempts
                        await self.outbox.mark_attempt_failed(
                            item.id, repr(exc), final=final, parts=parts.unsaved
                        )
                        parts.saved()
                        raise
        except Exception as exc:
            log.error(
                "delivery failed for good",
                platform=item.platform,
                session=item.session_id,
                task=item.task_hash,
                kind=item.kind,
                error=repr(exc),
            )
            await self._log_action(
                item.session_id,
                ActionKind.error,
                f"delivery of {item.kind} #{item.chunk_index} to {item.platform} failed "
                f"after {self.attempts} attempts: {exc!r}",
                item.task_hash,
            )
            return False
        # The platform has it now: what is left is to record that, however long the archive
        # stays unreachable (sent again, it would reach the user twice).
        await until_available(
            lambda: self.outbox.mark_delivered(item.id, message_id or "", parts=parts.unsaved),
            sleep=self.clock.sleep,
            what="delivered, not yet recorded",
            initial=self.initial_wait,
            maximum=self.max_wait,
        )
        return True

    async def redeliver(self) -> int:
        """Send every pending entry whose platform has an adapter here; returns how many."""
        sent = 0
        for item in await self.outbox.undelivered(set(self.sinks)):
            sent += await self.send(item)
        if sent:
            log.info("pending deliveries sent after restart", count=sent)
        return sent


class PartsRecord:
    """Keeps an entry's parts (`Progress`) in the outbox, one write fewer per part.

    What must be stored before the platform is handed a part is that the part may go out
    (`attempted` one past `sent`): a restart then marks it as a possible repeat. That a part
    was accepted can wait for the next write, which comes right after: the next part's
    start, or the entry marked delivered or failed, which carry it. A crash or a stop in
    between leaves the part recorded as maybe out, the window a crash just after the
    platform's answer leaves anyway.
    """

    def __init__(self, outbox: Outbox, item_id: int, sent: int) -> None:
        self.outbox = outbox
        self.item_id = item_id
        self._stored_sent = sent
        self.unsaved: Parts | None = None

    async def save(self, sent: int, attempted: int) -> None:
        if attempted == sent and sent > self._stored_sent:  # accepted parts, none in doubt
            self.unsaved = (sent, attempted)
            return
        await self.outbox.record_parts(self.item_id, sent, attempted)
        self.saved()
        self._stored_sent = sent

    def saved(self) -> None:
        if self.unsaved is not None:
            self._stored_sent = self.unsaved[0]
        self.unsaved = None
