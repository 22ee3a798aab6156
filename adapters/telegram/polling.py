"""Long polling that confirms an update only once it is handled.

Telegram keeps an update until a `getUpdates` call asks for a later offset. python-telegram-bot's
Updater asks for the next offset as soon as it has fetched a batch, before any handler ran, so
an update caught by a crash in between was lost. Here each update is handled (stored) first,
and only the next `getUpdates` call, or the last one at stop, moves the offset past it: after a
crash Telegram delivers it again, and its `source_key` makes that store nothing.

An update that finds the archive unreachable (`DatabaseUnavailable`) is not confirmed either: it
is handled again, with backoff, until the archive answers or polling stops (another instance, or
this one once it is back, then gets it again from Telegram).

Failures of `getUpdates` itself (the network, a 5xx, 409 Conflict while another poller or a
webhook holds the bot, 429) are logged and retried with backoff on the runtime's clock,
forever: polling never gives up on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Final, TypeVar

from telegram import Bot, Update
from telegram.error import RetryAfter, TelegramError
from tenacity import AsyncRetrying, RetryCallState, wait_exponential_jitter

from gateway.clock import Clock
from gateway.logs import get_logger
from gateway.store.errors import DatabaseUnavailable

log = get_logger(__name__)

T = TypeVar("T")

POLL_TIMEOUT: Final = 30  # seconds a getUpdates call waits for an update


class Poller:
    def __init__(
        self,
        bot: Callable[[], Bot],
        handle: Callable[[Update], Awaitable[bool]],
        clock: Clock,
        *,
        updates: Sequence[str],
    ) -> None:
        self._bot = bot
        self._handle = handle
        self.clock = clock
        self.updates = list(updates)
        self.timeout = POLL_TIMEOUT
        self.initial_wait = 1.0
        self.max_wait = 30.0
        self.offset = 0  # the next update wanted: everything before it is handled
        self._task: asyncio.Task[None] | None = None
        self._handling = False
        self._stopping = False

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name="telegram polling")

    async def stop(self) -> None:
        """Stop polling; an update being handled is finished first, then confirmed."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        if not self._handling:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self.offset:
            # A call that asks for the offset confirms what came before it; what it returns is
            # left for the next start.
            with contextlib.suppress(TelegramError):
                await self._bot().get_updates(
                    offset=self.offset, timeout=0, limit=1, allowed_updates=self.updates
                )

    async def _run(self) -> None:
        # A webhook left set would make every getUpdates fail with 409.
        await self._retrying(
            "deleteWebhook", lambda: self._bot().delete_webhook(drop_pending_updates=False)
        )
        while not self._stopping:
            batch = await self._retrying("getUpdates", self._fetch)
            for update in batch:
                if self._stopping:
                    return  # not handled, so not confirmed: Telegram keeps it
                if not await self._handle_one(update):
                    return  # stopping while the archive is unreachable: Telegram keeps it
                self.offset = update.update_id + 1

    async def _fetch(self) -> tuple[Update, ...]:
        return await self._bot().get_updates(
            offset=self.offset or None, timeout=self.timeout, allowed_updates=self.updates
        )

    async def _handle_one(self, update: Update) -> bool:
        """Handle `update`; whether to confirm it (False: polling stops with it unstored)."""
        # An update whose handling failed is confirmed all the same: one that fails every
        # time (a poison update) would otherwise block the bot's every chat for good. What was
        # stored of it stays stored; the failure is logged. An unreachable archive is not the
        # update's fault: it waits, and so do the updates behind it (they could not be stored
        # either), until the archive answers.
        for attempt in itertools.count(1):
            self._handling = True
            try:
                handled = await self._handle(update)
            except DatabaseUnavailable as exc:
                wait = min(self.max_wait, self.initial_wait * 2**attempt)
                log.warning(
                    "archive unreachable; the telegram update waits",
                    update_id=update.update_id,
                    error=str(exc),
                    attempt=attempt,
                    wait=round(wait, 2),
                )
            except Exception:
                log.exception("telegram update failed", update_id=update.update_id)
                return True
            else:
                if not handled:
                    log.warning(
                        "telegram update failed; confirmed anyway", update_id=update.update_id
                    )
                return True
            finally:
                self._handling = False
            if self._stopping:
                return False
            await self.clock.sleep(wait)  # a stop meanwhile cancels the sleep: nothing confirmed
        raise AssertionError("unreachable")  # pragma: no cover

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        retrying = AsyncRetrying(
            wait=self._wait,
            sleep=self.clock.sleep,
            before_sleep=lambda state: _log_failure(what, state),
        )
        async for attempt in retrying:
            with attempt:
                return await call()
        raise AssertionError("unreachable: retried until it works")  # pragma: no cover

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, RetryAfter):
            return _seconds(error.retry_after)  # Telegram says how long
        backoff = wait_exponential_jitter(
            multiplier=self.initial_wait, max=self.max_wait, jitter=self.initial_wait
        )
        return float(backoff(state))


def _seconds(value: Any) -> float:
    # RetryAfter.retry_after is an int or a timedelta, depending on PTB_TIMEDELTA.
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _log_failure(what: str, state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    log.warning(
        f"telegram {what} failed; retrying",
        error=repr(error),
        attempt=state.attempt_number,
        wait=round(wait, 2),
    )
