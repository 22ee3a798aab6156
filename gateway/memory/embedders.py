"""Turning text into vectors: an OpenAI-compatible `/v1/embeddings` endpoint, or, with no
embedding model configured, a local embedder that needs no download and no network.

Every embedder returns unit-length float32 vectors, so a dot product is the cosine similarity.
numpy is imported here and only here among the modules a client command could load: the
`agenvoy` client commands never import this module.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Sequence
from typing import Any, Protocol

import aiohttp
import numpy as np
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from gateway.agents.retries import Retryable, retry_after, wait_for_server
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.settings import Settings

# The local embedder: character trigrams of each word (with its boundaries) hashed into this
# many signed buckets. Named for what it is, so that vectors of another kind are never mixed
# with its own; a change of the scheme must change the name.
LOCAL_MODEL = "local-hashed-char-trigrams-384"
LOCAL_DIM = 384
# Texts per `/v1/embeddings` request, and characters of one text (past a model's input limit
# the endpoint refuses the whole batch; the start of a message says what it is about).
BATCH = 64
MAX_CHARS = 8000

_WORD = re.compile(r"\w+", re.UNICODE)


class EmbeddingFailed(RuntimeError):
    """The embedding endpoint could not embed the texts; the message says why."""


class Embedder(Protocol):
    model: str  # what the vectors are stored and searched under
    remote: bool  # goes over the network (may be slow, may be retried)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length float32 row per text."""
        ...

    async def aclose(self) -> None: ...


def normalized(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0  # an empty text stays the zero vector, similar to nothing
    return np.asarray(matrix / norms, dtype=np.float32)


def hashed_trigrams(text: str, dim: int = LOCAL_DIM) -> np.ndarray:
    """The local embedding of one text: each trigram of each lower-cased word (padded with
    its boundaries, so short words count too) adds ±1 to a bucket chosen by its CRC-32; texts
    sharing words, or parts of words, are near. Deterministic across processes (CRC-32, not
    Python's salted `hash`)."""
    vector = np.zeros(dim, dtype=np.float32)
    buckets: list[int] = []
    for word in _WORD.findall(text[:MAX_CHARS].lower()):
        padded = f" {word} ".encode()
        for i in range(len(padded) - 2):
            buckets.append(zlib.crc32(padded[i : i + 3]))
    if buckets:
        hashes = np.asarray(buckets, dtype=np.uint32)
        signs = np.where(hashes & 0x80000000, -1.0, 1.0).astype(np.float32)
        np.add.at(vector, (hashes % dim).astype(np.intp), signs)
    return vector


def local_embeddings(texts: Sequence[str]) -> np.ndarray:
    rows = [hashed_trigrams(t) for t in texts]
    return normalized(np.vstack(rows) if rows else np.zeros((0, LOCAL_DIM), np.float32))


class LocalEmbedder:
    """Hashed character trigrams: no model to download, no network, about as good as word
    overlap (it finds the old message that used the same words, not one that meant the same
    with others). Set `AGENVOY_EMBEDDING_MODEL` for meaning."""

    model = LOCAL_MODEL
    remote = False

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        # Tens of microseconds per message: not worth a thread hand-off for a query, but a
        # batch would hold the event loop for milliseconds.
        if len(texts) <= 4:
            return local_embeddings(texts)
        return await asyncio.to_thread(local_embeddings, texts)

    async def aclose(self) -> None:
        return None


class OpenAIEmbedder:
    """`POST {AGENVOY_OPENAI_BASE_URL}/embeddings` (OpenAI, Ollama, vLLM and others serve it)
    with `AGENVOY_EMBEDDING_MODEL`, in batches; rate limits and server errors are retried."""

    remote = True

    def __init__(self, settings: Settings, clock: Clock = SYSTEM_CLOCK) -> None:
        self.model = settings.embedding_model
        self.url = settings.openai_base_url.rstrip("/") + "/embeddings"
        key = settings.openai_api_key
        self.headers = {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}
        self.timeout = aiohttp.ClientTimeout(total=settings.openai_timeout_seconds)
        self.clock = clock
        self._http: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        batches = [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]
        rows = [await self._batch(batch) for batch in batches]
        return normalized(np.vstack(rows)) if rows else np.zeros((0, 0), np.float32)

    async def _batch(self, texts: Sequence[str]) -> np.ndarray:
        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda e: isinstance(e, Retryable)),
            stop=stop_after_attempt(4),
            wait=wait_for_server(wait_exponential_jitter(multiplier=0.5, max=20)),
            sleep=self.clock.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._post([t[:MAX_CHARS] or " " for t in texts])
        except Retryable as exc:
            raise EmbeddingFailed(f"the embedding endpoint is not available ({exc})") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _post(self, texts: list[str]) -> np.ndarray:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=self.timeout)
        body = {"model": self.model, "input": texts}
        try:
            async with self._http.post(self.url, json=body, headers=self.headers) as resp:
                if resp.status == 429 or resp.status >= 500:
                    raise Retryable(f"HTTP {resp.status}", retry_after(resp.headers))
                if resp.status >= 400:
                    detail = (await resp.text())[:300]
                    raise EmbeddingFailed(f"embeddings refused: HTTP {resp.status} {detail}")
                answer: Any = await resp.json()
        except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise Retryable(f"cannot reach {self.url}: {type(exc).__name__}", None) from exc
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or len(data) != len(texts):
            raise EmbeddingFailed("the embedding endpoint answered without one vector per text")
        ordered = sorted(data, key=lambda d: int(d.get("index", 0)))
        return np.asarray([d["embedding"] for d in ordered], dtype=np.float32)


def open_embedder(settings: Settings, clock: Clock = SYSTEM_CLOCK) -> Embedder:
    """The endpoint's model when `AGENVOY_EMBEDDING_MODEL` is set, the local embedder if not."""
    if settings.embedding_model:
        return OpenAIEmbedder(settings, clock)
    return LocalEmbedder()
