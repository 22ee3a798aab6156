"""Semantic recall: the messages of one session most similar to a text, never another
session's, and never those the agent still has in its window.

Each session's index lives in this process (`index.SessionIndex`), built on first use from
the archive's rows and brought up to date before every search by the rows stored since (one
indexed read); an index whose session was reindexed or deleted starts over. The least recently
used indexes are let go past `MAX_SESSIONS`. numpy and usearch work runs in threads.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import numpy as np

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.keyed_locks import KeyedLocks
from gateway.logs import get_logger
from gateway.memory.embedders import Embedder
from gateway.memory.index import HNSW_MIN, Hit, SessionIndex
from gateway.memory.recalled import Recalled
from gateway.store.vectors import MESSAGE, SUMMARY, VectorArchive

log = get_logger(__name__)

MAX_SESSIONS = 64  # indexes kept in memory at once
MAX_RECALL = 50  # results one search may ask for
# How long a task's context waits for its recall (the embedding endpoint may be slow or
# retrying): past it the task goes on without, rather than waiting on memory.
CONTEXT_DEADLINE_SECONDS = 5.0


class Recall:
    def __init__(
        self,
        vectors: VectorArchive,
        embedder: Embedder,
        *,
        count: int = 3,
        min_score: float | None = None,
        hnsw_min: int = HNSW_MIN,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        self.vectors = vectors
        self.embedder = embedder
        self.count = count  # recalled into each task's context; 0: none
        # What any recall or search drops below; None: the embedder's own (their scales differ).
        self.min_score = embedder.min_score if min_score is None else min_score
        self.hnsw_min = hnsw_min
        self._indexes: OrderedDict[str, SessionIndex] = OrderedDict()
        self._locks = KeyedLocks()
        self._builds: set[asyncio.Task[None]] = set()

    async def settled(self) -> None:
        """Wait for the graphs being built (a benchmark, a test)."""
        await asyncio.gather(*list(self._builds), return_exceptions=True)

    async def close(self) -> None:
        await self.settled()
        await self.embedder.aclose()

    async def index(self, session_id: str) -> SessionIndex | None:
        """The session's index, up to date with the archive; None when nothing is embedded."""
        model = self.embedder.model
        async with self._locks.hold(session_id):
            index = self._indexes.get(session_id)
            after = index.last_row if index else 0
            rows = await self.vectors.message_rows(session_id, model, after)
            if not rows.epoch:
                self._indexes.pop(session_id, None)  # deleted, or never embedded
                return None
            if index is not None and index.epoch != rows.epoch:
                index = None  # reindexed: the rows it holds are gone
                rows = await self.vectors.message_rows(session_id, model, 0)
            if index is None:
                if not rows.vectors:
                    return None
                dim = len(rows.vectors[0]) // 4
                index = SessionIndex(dim, rows.epoch, hnsw_min=self.hnsw_min)
            if rows.row_ids:
                await asyncio.to_thread(index.add, rows.row_ids[-1], rows.message_ids, rows.vectors)
            self._indexes[session_id] = index
            self._indexes.move_to_end(session_id)
            while len(self._indexes) > MAX_SESSIONS:
                self._indexes.popitem(last=False)
            if index.wants_graph():
                build = asyncio.create_task(asyncio.to_thread(index.build_graph))
                self._builds.add(build)
                build.add_done_callback(self._builds.discard)
            return index

    async def search(
        self,
        session_id: str,
        query: str,
        limit: int,
        *,
        before: int = 0,
        summaries: bool = False,
        min_score: float | None = None,
    ) -> list[Recalled]:
        """The `limit` messages of the session (and, with `summaries`, past summaries) most
        similar to `query`, best first; only messages with an id below `before` (0: any), and
        none less similar than `min_score` (None: `self.min_score`), so an unrelated query
        finds nothing rather than the least unrelated messages."""
        limit = max(1, min(limit, MAX_RECALL))
        floor = self.min_score if min_score is None else min_score
        vector = (await self.embedder.embed([query]))[0]
        if await self.vectors.uses_pgvector():  # one SQL query, shared by every instance
            blob = vector.astype("<f4").tobytes()
            found_pg = await self.vectors.pg_search(
                session_id, self.embedder.model, blob, limit, before
            )
            hits = [Hit(message_id, score) for message_id, score in found_pg]
        else:
            index = await self.index(session_id)
            hits = await asyncio.to_thread(index.search, vector, limit, before) if index else []
        found = await self.vectors.messages(session_id, [h.message_id for h in hits])
        recalled = [
            Recalled(h.message_id, MESSAGE, m.role, m.sender, m.content, m.send_at, h.score)
            for h in hits
            if (m := found.get(h.message_id)) is not None
        ]
        if summaries:
            recalled += await self._summaries(session_id, vector)
        recalled = [r for r in recalled if r.score >= floor]
        recalled.sort(key=lambda r: -r.score)
        return recalled[:limit]

    async def _summaries(self, session_id: str, vector: np.ndarray) -> list[Recalled]:
        """Every summary the session has had, scored (a few per session: no index needed)."""
        rows = await self.vectors.summary_rows(session_id, self.embedder.model)
        out = []
        for cursor, text, blob in rows:
            other = np.frombuffer(blob, dtype="<f4")
            if len(other) == len(vector):
                score = float(other @ vector)
                out.append(Recalled(cursor, SUMMARY, "system", "", text, 0, score))
        return out

    async def bound(self, session_id: str, query: str, limit: int, before: int) -> list[Recalled]:
        """A search as a task's `recall` (the tool, `!recall`): below the window, best first."""
        return await self.search(session_id, query, limit, before=before)

    async def for_context(self, session_id: str, text: str, before: int) -> list[Recalled]:
        """What a task's context recalls for its message: at most `count` messages older than
        its window (`before`, the oldest id the window holds), as similar as `min_score`.
        A failure (an embedding endpoint away), or no answer within the deadline, recalls
        nothing rather than failing or holding up the task."""
        if self.count <= 0 or not text.strip():
            return []
        found = self.search(session_id, text, self.count, before=before, min_score=self.min_score)
        try:
            if not self.embedder.remote:  # local work, milliseconds: no timer to set
                return await found
            return await self.clock.wait_for(found, CONTEXT_DEADLINE_SECONDS)
        except Exception as exc:  # recall is a help, never a reason for a task to fail
            log.warning("recall failed", session=session_id, error=repr(exc))
            return []
