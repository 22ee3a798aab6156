"""Semantic recall as the runtime holds it: the embedder from the settings, the background
indexer and the search, on the archive's vectors."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.memory.embedders import open_embedder
from gateway.memory.indexer import Indexer
from gateway.memory.recall import Recall
from gateway.settings import Settings
from gateway.store.vectors import VectorArchive


@dataclass
class Memory:
    vectors: VectorArchive
    indexer: Indexer
    recall: Recall

    @classmethod
    def open(
        cls, settings: Settings, vectors: VectorArchive, clock: Clock = SYSTEM_CLOCK
    ) -> Memory:
        """Recall over the store's `vectors` (`SessionStore.vectors`)."""
        embedder = open_embedder(settings, clock)
        recall = Recall(
            vectors,
            embedder,
            count=settings.recall_count,
            min_score=settings.recall_min_score,
            clock=clock,
        )
        return cls(vectors, Indexer(vectors, embedder), recall)

    async def close(self) -> None:
        await self.recall.close()  # closes the embedder the two share
