"""Semantic recall: the messages of one session most similar to a text, never another
session's, and never those the agent still has in its window; and, for a search by a person
(`search_sessions`), the same over the sessions they may read, each hit naming its session.

Each session's index lives in this process (`index.SessionIndex`), built on first use from
the archive's rows and brought up to date before every search by the rows stored since (one
indexed read); an index whose session was reindexed or deleted starts over. The least recently
used indexes are let go past `MAX_SESSIONS`. numpy and usearch work runs in threads.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, defaultdict
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.keyed_locks import KeyedLocks
from gateway.logs import get_logger
from gateway.memory.embedders import Embedder
from gateway.memory.index import HNSW_MIN, Hit, SessionIndex
from gateway.memory.recalled import Recalled
from gateway.store.ownership import Visibility
from gateway.store.vectors import MESSAGE, SUMMARY, VectorArchive

log = get_logger(__name__)

MAX_SESSIONS = 64  # indexes kept in memory at once
MAX_RECALL = 50  # results one search may ask for
# How long a task's context waits for its recall (the embedding endpoint may be slow or
# retrying): past it the task goes on without, rather than waiting on memory.
CONTEXT_DEADLINE_SECONDS = 5.0
# Sessions one search across sessions looks in (the most recently active), so one request
# stays bounded; below MAX_SESSIONS, so the indexes one search builds all stay in memory and
# the next search finds them built rather than evicting them one another.
MAX_SESSIONS_SEARCHED = 48
# Sessions searched at once: each brings its index up to date with a read of its own, and
# the database pool is shared with everything else the gateway does.
CONCURRENT_SESSIONS = 4

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SessionHit:
    """A hit of a search across sessions: what was found, and in which session."""

    session_id: str
    recalled: Recalled


@dataclass(frozen=True, slots=True)
class Searchable:
    """The sessions a search across sessions looks in, and whether more were left out."""

    session_ids: list[str]
    left_out: bool


class Recall:
    def __init__(
        self,
        vectors: VectorArchive,
        embedder: Embedder,
        *,
        count: int = 3,
        min_score: float | None = None,
        hnsw_min: int = HNSW_MIN,
        max_sessions_searched: int = MAX_SESSIONS_SEARCHED,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        self.vectors = vectors
        self.embedder = embedder
        self.count = count  # recalled into each task's context; 0: none
        # What any recall or search drops below; None: the embedder's own (their scales differ).
        self.min_score = embedder.min_score if min_score is None else min_score
        self.hnsw_min = hnsw_min
        self.max_sessions_searched = max_sessions_searched
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
            hits = await self._indexed_hits(session_id, vector, limit, before)
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

    async def _indexed_hits(
        self, session_id: str, vector: np.ndarray, limit: int, before: int
    ) -> list[Hit]:
        """The session's nearest messages by its in-process index (none when it has none)."""
        index = await self.index(session_id)
        return await asyncio.to_thread(index.search, vector, limit, before) if index else []

    async def searchable(self, visible: Visibility) -> Searchable:
        """The sessions `visible` shows that have embeddings with this embedder's model, the
        most recently active first, at most `max_sessions_searched` of them."""
        cap = max(1, self.max_sessions_searched)
        # One past the cap: whether some were left out, without counting them all.
        found = await self.vectors.searchable_sessions(self.embedder.model, visible, cap + 1)
        return Searchable(found[:cap], left_out=len(found) > cap)

    async def search_sessions(
        self,
        session_ids: Iterable[str],
        query: str,
        limit: int,
        *,
        summaries: bool = False,
        min_score: float | None = None,
    ) -> list[SessionHit]:
        """`search` over several sessions at once: the query embedded once, each session
        searched alone (its own index, or one pgvector query naming them all), the hits
        merged best first, none below the floor, at most `limit`. Only the sessions named are
        looked in: which a caller may read is the caller's to decide (`searchable`)."""
        sessions = list(dict.fromkeys(session_ids))
        if not sessions:
            return []  # nothing to compare with: no need to ask the embedder
        limit = max(1, min(limit, MAX_RECALL))
        floor = self.min_score if min_score is None else min_score
        vector = (await self.embedder.embed([query]))[0]
        model = self.embedder.model
        hits: list[tuple[str, Hit]]
        if await self.vectors.uses_pgvector():
            blob = vector.astype("<f4").tobytes()
            found_pg = await self.vectors.pg_search_sessions(sessions, model, blob, limit)
            hits = [(sid, Hit(message_id, score)) for sid, message_id, score in found_pg]
        else:

            async def one(sid: str) -> list[tuple[str, Hit]]:
                return [(sid, h) for h in await self._indexed_hits(sid, vector, limit, 0)]

            per_session = await _bounded_gather([one(sid) for sid in sessions])
            hits = [pair for found in per_session for pair in found]
        # Scores are known before the texts: only the best `limit` are read from the archive.
        candidates: list[tuple[float, str, Hit | Recalled]] = [
            (h.score, sid, h) for sid, h in hits if h.score >= floor
        ]
        if summaries:
            candidates += [
                (r.score, sid, r)
                for sid, r in await self._summaries_of(sessions, vector)
                if r.score >= floor
            ]
        candidates.sort(key=lambda c: -c[0])
        best = candidates[:limit]
        wanted: dict[str, list[int]] = defaultdict(list)
        for _, sid, item in best:
            if isinstance(item, Hit):
                wanted[sid].append(item.message_id)
        texts = {sid: await self.vectors.messages(sid, ids) for sid, ids in wanted.items()}
        out = []
        for score, sid, item in best:
            if isinstance(item, Recalled):
                out.append(SessionHit(sid, item))
            elif (m := texts[sid].get(item.message_id)) is not None:  # None: deleted since
                recalled = Recalled(
                    item.message_id, MESSAGE, m.role, m.sender, m.content, m.send_at, score
                )
                out.append(SessionHit(sid, recalled))
        return out

    async def _summaries_of(
        self, session_ids: list[str], vector: np.ndarray
    ) -> list[tuple[str, Recalled]]:
        """Every summary the sessions have had, scored, in one read."""
        rows = await self.vectors.summary_rows_of(session_ids, self.embedder.model)
        out = []
        for sid, cursor, text, blob in rows:
            other = np.frombuffer(blob, dtype="<f4")
            if len(other) == len(vector):
                score = float(other @ vector)
                out.append((sid, Recalled(cursor, SUMMARY, "system", "", text, 0, score)))
        return out

    async def _summaries(self, session_id: str, vector: np.ndarray) -> list[Recalled]:
        """Every summary the session has had, scored (a few per session: no index needed)."""
        return [r for _, r in await self._summaries_of([session_id], vector)]

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


async def _bounded_gather(work: list[Awaitable[T]]) -> list[T]:
    """`asyncio.gather`, at most `CONCURRENT_SESSIONS` of `work` running at once."""
    gate = asyncio.Semaphore(CONCURRENT_SESSIONS)

    async def held(step: Awaitable[T]) -> T:
        async with gate:
            return await step

    return await asyncio.gather(*(held(step) for step in work))
