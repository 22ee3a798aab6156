"""An in-process index of one session's message vectors, built from the archive's rows and
kept up to date by the rows stored after the last one it has.

One index per session, so a search never sees another session's vectors: the filter is the
index itself, not a step after it. Below `HNSW_MIN` vectors the search is exact (a matrix
product, a few milliseconds); past it a usearch HNSW graph is built in a thread and answers
from then on (well under a millisecond at 100,000 vectors), while the exact search answers
until it is ready. Messages the caller wants left out (the agent's window) are the newest of
the session: the graph is asked for that many more, and they are dropped.

All the work here is synchronous numpy/usearch work: callers run it in a thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from gateway.logs import get_logger

log = get_logger(__name__)

HNSW_MIN = 20_000
# usearch's graph: neighbours per node and the breadth of the search while adding; lower
# than its defaults, which built a 100,000-vector graph too slowly on a small machine.
CONNECTIVITY = 16
EXPANSION_ADD = 64
EXPANSION_SEARCH = 256


@dataclass(frozen=True, slots=True)
class Hit:
    message_id: int
    score: float  # cosine similarity


class SessionIndex:
    """The vectors of one session and one model, in the order their rows were stored."""

    def __init__(self, dim: int, epoch: str, *, hnsw_min: int = HNSW_MIN) -> None:
        self.dim = dim
        self.epoch = epoch
        self.last_row = 0  # the newest archive row it holds
        self.hnsw_min = hnsw_min
        self._ids = np.zeros(0, dtype=np.int64)
        self._matrix = np.zeros((0, dim), dtype=np.float32)
        self._size = 0
        self._graph: object | None = None  # a usearch Index once built
        self._graph_size = 0  # vectors the graph holds (the first ones)
        self._building = False
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._size

    def add(self, last_row: int, message_ids: list[int], vectors: list[bytes]) -> None:
        """Take in rows stored after `self.last_row`, up to `last_row`."""
        if not message_ids:
            self.last_row = max(self.last_row, last_row)
            return
        block = np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(vectors), self.dim)
        with self._lock:
            need = self._size + len(block)
            if need > len(self._ids):  # grow by doubling: appends cost O(1) each on average
                capacity = max(need, 2 * len(self._ids), 1024)
                ids = np.zeros(capacity, dtype=np.int64)
                matrix = np.zeros((capacity, self.dim), dtype=np.float32)
                ids[: self._size] = self._ids[: self._size]
                matrix[: self._size] = self._matrix[: self._size]
                self._ids, self._matrix = ids, matrix
            self._ids[self._size : need] = message_ids
            self._matrix[self._size : need] = block
            self._size = need
            self.last_row = max(self.last_row, last_row)
            graph = self._graph
        if graph is not None:
            self._extend_graph(graph)

    @property
    def has_graph(self) -> bool:
        return self._graph is not None

    def wants_graph(self) -> bool:
        """Whether a graph should be built now (in a thread: `build_graph`)."""
        return self._size >= self.hnsw_min and self._graph is None and not self._building

    def build_graph(self) -> None:
        from usearch.index import Index  # imported only by a session that needs it

        with self._lock:
            if self._graph is not None or self._building:
                return
            self._building = True
            size = self._size
            matrix = self._matrix[:size].copy()
        try:
            graph = Index(
                ndim=self.dim,
                metric="ip",
                dtype="f32",
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
                expansion_search=EXPANSION_SEARCH,
            )
            graph.add(np.arange(size, dtype=np.uint64), matrix)
            with self._lock:
                self._graph, self._graph_size = graph, size
            self._extend_graph(graph)  # what was added while it was being built
            log.info("recall index built", vectors=size)
        finally:
            self._building = False

    def _extend_graph(self, graph: object) -> None:
        with self._lock:
            start, end = self._graph_size, self._size
            if end <= start:
                return
            graph.add(np.arange(start, end, dtype=np.uint64), self._matrix[start:end])  # type: ignore[attr-defined]
            self._graph_size = end

    def search(self, query: np.ndarray, k: int, before: int) -> list[Hit]:
        """The `k` vectors most similar to `query` among messages with an id below `before`
        (0: all), best first."""
        with self._lock:
            size, graph, graph_size = self._size, self._graph, self._graph_size
            ids = self._ids[:size]
            matrix = self._matrix[:size]
        if size == 0 or k <= 0:
            return []
        allowed = ids < before if before else np.ones(size, dtype=bool)
        if graph is not None and graph_size == size:
            left_out = size - int(np.count_nonzero(allowed))
            # One thread: a single query gains nothing from more, and waits for them under load.
            wanted = min(size, k + left_out)
            found = graph.search(query, wanted, threads=1)  # type: ignore[attr-defined]
            hits = [
                Hit(int(ids[key]), 1.0 - float(distance))
                for key, distance in zip(found.keys, found.distances, strict=False)
                if allowed[key]
            ]
            return hits[:k]
        scores = matrix @ query
        candidates = int(np.count_nonzero(allowed))
        if candidates == 0:
            return []
        if candidates < size:
            scores[~allowed] = -np.inf  # a copy of the scores, never of the vectors
        top = min(k, candidates)
        best = np.argpartition(-scores, top - 1)[:top]
        best = best[np.argsort(-scores[best])]
        return [Hit(int(ids[i]), float(scores[i])) for i in best]
