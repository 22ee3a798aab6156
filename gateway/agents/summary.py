"""The rolling summary: older messages folded into the session's summary, off the reply path.

When messages that the summary does not cover yet have fallen out of the model's window, the
summary model folds them into the summary and its cursor moves to the last of them (an archive
message id); both are kept in the archive (`store.summaries`) and copied to `summary.json`.
Messages are folded in batches (`fold_batch`): until a batch has gathered outside the window,
the agent sees them in its window instead, so a long conversation costs one summary call per
batch rather than one per message, and nothing is out of sight meanwhile. Each message is
folded once; a failed attempt leaves the cursor where it was, so the next attempt takes the
same messages again. Summaries run in the background, one at a time per
session, and never delay a reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from gateway.clock import now_ms
from gateway.keyed_locks import KeyedLocks
from gateway.logs import get_logger
from gateway.store.files import Summary
from gateway.store.sessions import SessionStore, StoredMessage

log = get_logger(__name__)

MAX_FOLD = 200  # messages folded per model call at most


def fold_batch(window: int) -> int:
    """How many messages must have left a `window`-message window before they are folded."""
    return max(1, window // 2)


@runtime_checkable
class Summarizes(Protocol):
    async def summarize(self, previous: str, messages: Sequence[StoredMessage]) -> str: ...


class RollingSummary:
    def __init__(
        self, store: SessionStore, model: Summarizes, window: int, batch: int | None = None
    ) -> None:
        self.store = store
        self.model = model
        self.window = window
        self.batch = batch or fold_batch(window)
        self._locks = KeyedLocks()
        self._jobs: set[asyncio.Task[bool]] = set()

    def schedule(self, session_id: str) -> None:
        """Start a background fold for this session (a no-op when nothing is due)."""
        job = asyncio.create_task(self.run(session_id))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    async def close(self) -> None:
        for job in list(self._jobs):
            job.cancel()
        await asyncio.gather(*list(self._jobs), return_exceptions=True)

    async def run(self, session_id: str) -> bool:
        """Fold what is due; returns whether the summary moved."""
        async with self._locks.hold(session_id):
            try:
                return await self._fold(session_id)
            except Exception as exc:  # a failed summary must never hurt the session
                log.warning("summary failed; will retry later", session=session_id, error=repr(exc))
                return False

    async def _fold(self, session_id: str) -> bool:
        state, oldest_in_window, due_count = await self.store.fold_position(session_id, self.window)
        current = state.summary if state else None
        cursor = current.cursor if current else 0
        if min(due_count, MAX_FOLD) < self.batch:
            return False  # seen in the window until a whole batch is due
        due = [
            m
            for m in await self.store.messages_after(session_id, cursor, limit=MAX_FOLD)
            if m.id < oldest_in_window
        ]
        if len(due) < self.batch:
            return False  # seen in the window until a whole batch is due
        text = await self.model.summarize(current.text if current else "", due)
        reset_at = state.reset_at if state else 0
        await self.store.save_summary(
            session_id, Summary(text, due[-1].id, now_ms()), reset_at=reset_at
        )
        log.info("summary advanced", session=session_id, folded=len(due), cursor=due[-1].id)
        return True
