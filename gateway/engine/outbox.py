"""Once-only delivery: every reply and prompt goes out through the outbox.

An entry is recorded (gateway.store.outbox) before it is handed to the adapter, and marked
delivered with the platform's message id when the adapter returns. A failed hand-off is tried
again a few times at once, with short waits, inside the task that made it (a blip costs the
user nothing and keeps the session's replies in order); past that, the entry waits in the
background, tried with an exponential backoff (capped) until it is delivered or
`expiry_seconds` after its first failure, when it is marked failed. Its attempts, next try
and expiry are kept in the entry, so a restart goes on with them (trying each pending entry
once at start). A later entry of the same session waits behind one in backoff, so replies
still reach a chat in the order they were made. A platform that refuses an entry for good
(`Undeliverable`: a chat that is gone, a bot that was blocked) ends it at once. Every entry
that ends undelivered is counted (`deliveries_failed`), logged and written to the session's
action.log, where the task's status shows it — never dropped silently.

A reply the platform takes in several parts records each accepted part with its entry
(`Progress`), so a restart between parts goes on from the next one. The one window left is a
crash after the platform accepted a part and before it was recorded: that part is sent again
on restart. Adapters close it where the platform allows (Discord's `enforce_nonce`, keyed by
the task and part).

A prompt still open at a restart is asked again as a new entry of the same chunk; the sink is
told where the earlier askings went (`Progress.earlier`), so it can take their buttons away.

With several instances, an entry is sent only by the instance that claimed it
(`claimant`): two instances that both see it pending (a redelivery pass, a task taken over)
send it once. A claim left by an instance that died lapses after `claim_seconds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Mapping
from enum import Enum

from gateway.adapter import Progress, Sink, Undeliverable
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.engine.traffic import EXPIRED, REFUSED, RETRIED, Traffic
from gateway.events import Origin, event_from_obj
from gateway.logs import get_logger
from gateway.store.actionlog import ActionKind
from gateway.store.errors import until_available
from gateway.store.outbox import Outbox, OutboxItem, Parts

log = get_logger(__name__)

OUTBOX_KINDS = frozenset({"text", "confirm", "ask_user", "error"})
PROMPT_KINDS = frozenset({"confirm", "ask_user"})
SENT_KEPT = 4096  # entries remembered as sent by this process
DEFAULT_EXPIRY_SECONDS = 6 * 3600.0


class Outcome(Enum):
    DELIVERED = "delivered"
    ENDED = "ended"  # failed for good: refused, or expired
    WAITING = "waiting"  # to be tried again at its next_attempt_at
    ELSEWHERE = "elsewhere"  # not this instance's to send (no adapter here, another's claim)


class Courier:
    def __init__(
        self,
        outbox: Outbox,
        sinks: Mapping[str, Sink],
        log_action: Callable[[str, str, str, str, str], Awaitable[object]],
        *,
        clock: Clock = SYSTEM_CLOCK,
        attempts: int = 5,
        initial_wait: float = 0.5,
        max_wait: float = 30.0,
        retry_cap: float = 300.0,
        expiry_seconds: float = DEFAULT_EXPIRY_SECONDS,
        claimant: str | None = None,
        claim_seconds: float = 30.0,
        counters: dict[str, int] | None = None,
        traffic: Traffic | None = None,
    ) -> None:
        """`attempts` are made at once, `initial_wait` doubling between them; later ones
        wait twice as long each time, up to `retry_cap`, for `expiry_seconds` in all.
        `max_wait` caps the wait for the archive to record a delivery."""
        self.outbox = outbox
        self.sinks = sinks
        self._log_action = log_action
        self.clock = clock
        self.attempts = attempts
        self.initial_wait = initial_wait
        self.max_wait = max_wait
        self.retry_cap = retry_cap
        self.expiry_seconds = expiry_seconds
        self.claimant = claimant
        self.claim_seconds = claim_seconds
        self.counters = counters if counters is not None else {}
        self.counters.setdefault("deliveries_failed", 0)  # /metrics shows it from the start
        self.traffic = traffic if traffic is not None else Traffic()
        # Entries this process is sending, and those it sent lately (bounded): a pass over
        # the pending ones (`redeliver`) lists an entry its own task may be sending, or have
        # sent since the list was read. Claims (`take`) settle that between instances only.
        self._sending: set[int] = set()
        self._sent: dict[int, None] = {}
        # Per session, the entries waiting in backoff here, oldest first, and the task that
        # tries them: what comes later for the session queues behind them.
        self._backlog: dict[str, list[int]] = {}
        self._drains: dict[str, asyncio.Task[None]] = {}

    async def send(self, item: OutboxItem) -> bool:
        """Deliver `item` unless it already was; True once it is delivered. An entry that
        keeps failing is left to the background (False)."""
        return await self._send_once(item, burst=True) is Outcome.DELIVERED

    async def _send_once(self, item: OutboxItem, *, burst: bool) -> Outcome:
        if item.status == "delivered" or item.id in self._sent:
            return Outcome.DELIVERED
        if item.id in self._sending:
            return Outcome.WAITING  # on its way already, from here
        backlog = self._backlog.get(item.session_id)
        if backlog is not None:
            # An earlier reply of the session is waiting: this one goes after it.
            if item.id not in backlog:
                backlog.append(item.id)
                backlog.sort()
            return Outcome.WAITING
        outcome = await self._attempt(item, burst=burst)
        if outcome is Outcome.WAITING:
            self._queue(item.session_id, item.id)
        return outcome

    async def _attempt(self, item: OutboxItem, *, burst: bool) -> Outcome:
        self._sending.add(item.id)
        try:
            outcome = await self._send(item, burst=burst)
        finally:
            self._sending.discard(item.id)
        if outcome is Outcome.DELIVERED:
            self._sent[item.id] = None
            if len(self._sent) > SENT_KEPT:
                del self._sent[next(iter(self._sent))]
        return outcome

    async def _send(self, item: OutboxItem, *, burst: bool) -> Outcome:
        sink = self.sinks.get(item.platform)
        if sink is None:
            # No adapter for that platform in this process: it stays pending for one that has.
            log.info("outbox entry waits for its adapter", platform=item.platform, id=item.id)
            return Outcome.ELSEWHERE
        if self.claimant is not None:
            claimed = await self.outbox.take(item.id, self.claimant, int(self.claim_seconds * 1000))
            if claimed is None:
                log.info("outbox entry sent by another instance", id=item.id)
                return Outcome.ELSEWHERE
            item = claimed
        origin = Origin.from_json(item.payload["origin"])
        event = event_from_obj(item.payload["event"])

        parts = PartsRecord(self.outbox, item.id, item.parts_sent)
        earlier = await self.outbox.earlier_deliveries(item) if item.kind in PROMPT_KINDS else ()
        progress = Progress(item.parts_sent, item.parts_attempted, parts.save, earlier)
        attempts, expires_at = item.attempts, item.expires_at
        while True:
            try:
                message_id = await sink.deliver(origin, event, progress)
                break
            except Exception as exc:
                attempts += 1
                now = self.clock.now_ms()
                expires_at = expires_at or now + int(self.expiry_seconds * 1000)
                wait = self.wait_before(attempts + 1)
                refused = isinstance(exc, Undeliverable)
                final = refused or now + int(wait * 1000) >= expires_at
                why = (REFUSED if refused else EXPIRED) if final else RETRIED
                self.traffic.delivery_failed(item.platform, why)
                record = self.outbox.mark_attempt_failed(
                    item.id,
                    repr(exc.__cause__ or exc) if refused else repr(exc),
                    final=final,
                    parts=parts.unsaved,
                    next_attempt_at=now + int(wait * 1000),
                    expires_at=expires_at,
                )
                if final:
                    # Recorded whole even when the refusal cancels the task sending it (a bot
                    # removed from a chat ends the chat's tasks).
                    await asyncio.shield(self._ended(record, item, exc, attempts, refused=refused))
                    return Outcome.ENDED
                await record
                parts.saved()
                if not burst or attempts >= self.attempts:
                    log.warning(
                        "delivery failed; tried again later",
                        platform=item.platform,
                        session=item.session_id,
                        task=item.task_hash,
                        attempts=attempts,
                        wait=round(wait, 3),
                        error=repr(exc),
                    )
                    return Outcome.WAITING
                await self.clock.sleep(wait)
        # The platform has it now: what is left is to record that, however long the archive
        # stays unreachable (sent again, it would reach the user twice).
        await until_available(
            lambda: self.outbox.mark_delivered(item.id, message_id or "", parts=parts.unsaved),
            sleep=self.clock.sleep,
            what="delivered, not yet recorded",
            initial=self.initial_wait,
            maximum=self.max_wait,
        )
        self.traffic.delivered(item.platform, item.kind)
        return Outcome.DELIVERED

    def wait_before(self, attempt: int) -> float:
        """The wait before attempt number `attempt` (2 or more): exponential from
        `initial_wait`, capped, with jitter in proportion to the first wait (so a short
        backoff stays short, and entries failing together do not retry in step)."""
        base = min(self.initial_wait * 2.0 ** max(0, attempt - 2), self.retry_cap)
        return base + random.uniform(0, self.initial_wait)

    async def _ended(
        self,
        record: Awaitable[None],
        item: OutboxItem,
        exc: Exception,
        attempts: int,
        *,
        refused: bool,
    ) -> None:
        await record
        self.counters["deliveries_failed"] += 1
        why = f"refused by {item.platform}" if refused else f"failed after {attempts} attempts"
        error = (exc.__cause__ or exc) if refused else exc
        log.error(
            "delivery failed for good",
            platform=item.platform,
            session=item.session_id,
            task=item.task_hash,
            kind=item.kind,
            attempts=attempts,
            refused=refused,
            error=repr(error),
        )
        await self._log_action(
            item.session_id,
            ActionKind.error,
            f"delivery of {item.kind} #{item.chunk_index} to {item.platform} {why}: {error!r}",
            item.task_hash,
            _acting_for(item),
        )

    # -- the background ----------------------------------------------------------------------

    def _queue(self, session_id: str, item_id: int) -> None:
        backlog = self._backlog.setdefault(session_id, [])
        if item_id not in backlog:
            backlog.append(item_id)
            backlog.sort()
        if session_id not in self._drains:
            self._drains[session_id] = asyncio.create_task(
                self._drain(session_id), name=f"outbox:{session_id}"
            )

    async def _drain(self, session_id: str) -> None:
        """Try the session's waiting entries, oldest first, each when it is due."""
        backlog = self._backlog[session_id]
        try:
            while backlog:
                try:
                    if await self._try_head(backlog[0]):
                        backlog.pop(0)
                except Exception as exc:  # the archive away: the entry stays, tried later
                    log.warning("outbox retry failed", session=session_id, error=repr(exc))
                    await self.clock.sleep(self.max_wait)
        finally:
            del self._drains[session_id]
            del self._backlog[session_id]

    async def _try_head(self, item_id: int) -> bool:
        """One attempt at the entry when it is due; True once it needs no more from here."""
        item = await self.outbox.get(item_id)
        if item is None or item.status != "pending":
            return True
        wait = (item.next_attempt_at - self.clock.now_ms()) / 1000
        if wait > 0:
            await self.clock.sleep(wait)
        return await self._attempt(item, burst=False) is not Outcome.WAITING

    async def redeliver(self, *, due_only: bool = False) -> int:
        """Try every pending entry whose platform has an adapter here (with `due_only`, those
        whose next attempt is due); returns how many were delivered. What fails waits in
        the background for its next attempt."""
        sent = 0
        due_by = self.clock.now_ms() if due_only else None
        for item in await self.outbox.undelivered(set(self.sinks), due_by=due_by):
            sent += await self._send_once(item, burst=False) is Outcome.DELIVERED
        if sent:
            log.info("pending deliveries sent", count=sent)
        return sent

    def waiting(self) -> int:
        """Entries waiting in backoff here."""
        return sum(len(backlog) for backlog in self._backlog.values())

    async def close(self) -> None:
        """Stop trying: what waits stays pending in the outbox, for the next start."""
        drains = list(self._drains.values())
        for drain in drains:
            drain.cancel()
        for drain in drains:
            with contextlib.suppress(asyncio.CancelledError):
                await drain


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


def _acting_for(item: OutboxItem) -> str:
    """Whom the entry's task acts for, from the origin it was recorded with ("" for an entry
    without one)."""
    origin = item.payload.get("origin")
    return Origin.from_json(origin).sender_key if isinstance(origin, dict) else ""
