"""Semantic recall as the runtime holds it: the embedder from the settings, the background
indexer and the search, on the archive's vectors; and the knowledge of attached documents,
embedded with the same embedder."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.knowledge.service import Knowledge
from gateway.memory.embedders import open_embedder
from gateway.memory.indexer import Indexer
from gateway.memory.recall import Recall
from gateway.settings import Settings
from gateway.store.knowledge import KnowledgeArchive
from gateway.store.vectors import VectorArchive


@dataclass
class Memory:
    vectors: VectorArchive
    indexer: Indexer
    recall: Recall
    knowledge: Knowledge

    @classmethod
    def open(
        cls,
        settings: Settings,
        vectors: VectorArchive,
        knowledge: KnowledgeArchive,
        clock: Clock = SYSTEM_CLOCK,
    ) -> Memory:
        """Recall over the store's `vectors` (`SessionStore.vectors`) and knowledge over its
        `knowledge`."""
        embedder = open_embedder(settings, clock)
        recall = Recall(
            vectors,
            embedder,
            count=settings.recall_count,
            min_score=settings.recall_min_score,
            clock=clock,
        )
        documents = Knowledge(knowledge, embedder, settings, clock)
        return cls(vectors, Indexer(vectors, embedder), recall, documents)

    async def close(self) -> None:
        await self.recall.close()  # closes the embedder the three share
