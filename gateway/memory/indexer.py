"""Embedding in the background: every archived message, and every summary, of every session.

Like the rolling summary, it goes by a cursor per session (`store.vectors`): each message is
embedded once, in id order, in batches (one `/v1/embeddings` request per batch); vectors and
the cursor are stored in one transaction, so a failed batch leaves the cursor where it was and
the next run — after a restart too — takes the same messages again. A session whose
embeddings were made with another model than the configured one is left alone (and said so
once) until `agenvoy reindex` makes them again: re-embedding a whole archive is a cost the
operator decides on.

The job (`embed_due`) runs every `AGENVOY_EMBEDDING_INTERVAL_SECONDS` on the instance holding
the `job:embeddings` lease, and looks only at sessions with messages archived since its last
run (one indexed read) or a newer summary.
"""

from __future__ import annotations

import asyncio

from gateway.logs import get_logger
from gateway.memory.embedders import Embedder
from gateway.store.vectors import MESSAGE, VectorArchive

log = get_logger(__name__)

# Items read, embedded and stored together. The indexer shares the one SQLite writer and the
# interpreter with the requests being answered: 8 sessions of 256 at once stalled every request
# for 200-340 ms at each of its runs under load (POST /v1/send, 20 sessions), 2 of 64 for
# 160-190 ms, and it still keeps up with hundreds of messages a second.
BATCH = 64
SESSIONS_AT_ONCE = 2


class Indexer:
    def __init__(self, vectors: VectorArchive, embedder: Embedder, *, batch: int = BATCH) -> None:
        self.vectors = vectors
        self.embedder = embedder
        self.batch = batch
        self._seen = 0  # the newest message id every due session was embedded up to
        self._told: set[str] = set()  # sessions already said to need a reindex
        self._lock = asyncio.Lock()

    async def embed_due(self) -> int:
        """Embed what every session has due; returns how many items were embedded."""
        async with self._lock:
            sessions, newest = await self.vectors.due_sessions(self._seen)
            # A few sessions at a time: their reads spread over the readers and their saves
            # share commits, where one after another each paid its own. Workers take the next
            # session from one queue, so a first run over 100,000 sessions holds two tasks.
            queue = iter(sessions)
            done, failed = 0, False

            async def worker() -> None:
                nonlocal done, failed
                for session_id in queue:
                    try:
                        embedded = await self.embed_session(session_id)
                    except Exception as exc:  # the next run takes the session up again
                        failed = True
                        log.warning("embedding failed", session=session_id, error=repr(exc))
                    else:
                        done += embedded  # after the await: `done += await …` would lose counts

            await asyncio.gather(*(worker() for _ in range(SESSIONS_AT_ONCE)))
            if not failed:
                self._seen = newest
            return done

    async def embed_session(self, session_id: str) -> int:
        """Embed everything the session has past its cursor; returns how many items."""
        model, done = self.embedder.model, 0
        while True:
            cursor, items = await self.vectors.due(session_id, self.batch)
            if cursor is not None and cursor.model != model:
                if session_id not in self._told:
                    self._told.add(session_id)
                    log.warning(
                        "embeddings were made with another model; run `agenvoy reindex`",
                        session=session_id,
                        stored=cursor.model,
                        configured=model,
                    )
                return done
            if not items:
                return done
            matrix = await self.embedder.embed([item.text for item in items])
            blobs = [row.astype("<f4").tobytes() for row in matrix]
            dim = int(matrix.shape[1])
            if not await self.vectors.save(session_id, cursor, model, items, blobs, dim):
                continue  # another writer moved the cursor meanwhile: read it again, go on
            done += len(items)
            if sum(item.kind == MESSAGE for item in items) < self.batch:
                # A short batch took everything there was when it was read; what was archived
                # since is the next run's (it is newer than the `newest` this run goes up to).
                return done

    async def reindex(self, session_id: str) -> int:
        """Drop the session's embeddings and make them again with the configured model."""
        await self.vectors.reset(session_id, self.embedder.model)
        self._told.discard(session_id)
        return await self.embed_session(session_id)
