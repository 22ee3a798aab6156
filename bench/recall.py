"""Semantic recall: recall latency over one session's 100,000 messages, and embedding
throughput, each against a floor measured in the same run.

    .venv/bin/python bench/recall.py [--quick] [--json FILE]

1. Embedding throughput of the local embedder (`LocalEmbedder.embed`, batches of 256), against
   a floor: the same trigram CRC-32s computed and nothing else (the Python work any hashed
   n-gram embedder does per message). Also shown: the background indexer end to end
   (`Indexer.embed_session`: messages read from SQL, embedded, vectors and cursor stored).
2. Recall latency p50/p99 over 100,000 messages of one session (--quick: 10,000): ours is
   `Recall.search` as a task's context calls it — the query embedded, the session's index
   brought up to date from SQL, the usearch graph searched with the newest 36 messages left
   out (a window), the messages read back. The floor is a brute-force numpy search over the
   same vectors (matrix @ query, argpartition) with the query vector given. The two take turns,
   query by query. Target: ours p99 < 50 ms. Also shown: how long loading the index and
   building its graph took (once per session and process), and how often the graph's top 5
   holds the exact search's best.

SQLite, in a temporary directory removed at the end; synthetic messages from a fixed seed.
The exit status is 0 when the run finishes, whether or not the target is met.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from gateway.logs import configure_logging
from gateway.memory.embedders import LocalEmbedder
from gateway.memory.index import HNSW_MIN
from gateway.memory.indexer import Indexer
from gateway.memory.recall import Recall
from gateway.store.db import Database
from gateway.store.vectors import VectorArchive

SID = "cli-bench"
WINDOW = 36  # a 24-message window and half a fold batch: what the agent still sees
TARGET_P99_MS = 50.0


def messages(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(8000)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(6, 30))) for _ in range(count)]


def trigram_floor(texts: list[str]) -> int:
    """The floor of a hashed-trigram embedding: every CRC-32, no vector."""
    total = 0
    for text in texts:
        for word in text.lower().split():
            padded = f" {word} ".encode()
            for i in range(len(padded) - 2):
                total ^= zlib.crc32(padded[i : i + 3])
    return total


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def seed_archive(path: Path, texts: list[str]) -> None:
    """The session's messages, inserted with bare sqlite3 into the migrated schema."""
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO session (id, name, role, rule, model, reasoning, settings, "
        "created_at, updated_at, self_id) VALUES (?, '', '', '', '', '', '{}', 0, 0, '')",
        (SID,),
    )
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, sender, send_at, task_hash, source_key)"
        " VALUES (?, 'user', ?, 'bench', ?, '', '')",
        [(SID, t, 1_700_000_000_000 + i) for i, t in enumerate(texts)],
    )
    conn.commit()
    conn.close()


async def embedding_throughput(texts: list[str]) -> dict[str, float]:
    embedder = LocalEmbedder()
    sample = texts[:20_000]
    rounds: dict[str, list[float]] = {"ours": [], "floor": []}
    for start in range(0, len(sample), 2000):
        chunk = sample[start : start + 2000]
        began = time.perf_counter()
        for i in range(0, len(chunk), 256):
            await embedder.embed(chunk[i : i + 256])
        rounds["ours"].append(len(chunk) / (time.perf_counter() - began))
        began = time.perf_counter()
        trigram_floor(chunk)
        rounds["floor"].append(len(chunk) / (time.perf_counter() - began))
    ours, floor = statistics.median(rounds["ours"]), statistics.median(rounds["floor"])
    return {"ours_per_s": ours, "floor_per_s": floor, "slowdown": floor / ours}


async def run(size: int, queries: int, hnsw_min: int) -> dict[str, float]:
    texts = messages(size)
    results: dict[str, float] = {"messages": size}
    print("embedding throughput...", file=sys.stderr)
    results.update({f"embed_{k}": v for k, v in (await embedding_throughput(texts)).items()})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.db"
        db = await Database.open(f"sqlite:///{path}")
        try:
            seed_archive(path, texts)
            vectors = VectorArchive(db)
            print(f"indexer over {size} messages...", file=sys.stderr)
            began = time.perf_counter()
            done = await Indexer(vectors, LocalEmbedder()).embed_session(SID)
            results["indexer_per_s"] = done / (time.perf_counter() - began)
            recall = Recall(vectors, LocalEmbedder(), hnsw_min=hnsw_min)
            began = time.perf_counter()
            index = await recall.index(SID)  # loads the rows, starts building the graph
            assert index is not None and len(index) == size
            results["index_load_s"] = time.perf_counter() - began
            print("building the graph...", file=sys.stderr)
            began = time.perf_counter()
            await recall.settled()  # the graph the first search started building
            assert index.has_graph, "no graph was built"
            results["graph_build_s"] = time.perf_counter() - began
            matrix = np.frombuffer(
                b"".join((await vectors.message_rows(SID, LocalEmbedder.model, 0)).vectors),
                dtype="<f4",
            ).reshape(size, -1)
            first = await db.read(
                lambda s: s.connection().exec_driver_sql("SELECT min(id) FROM messages").scalar()
            )
            assert first is not None, "the archive is empty"
            before = int(first) + size - WINDOW
            rng = random.Random(11)
            ours_ms: list[float] = []
            floor_ms: list[float] = []
            agree = 0
            print(f"{queries} queries...", file=sys.stderr)
            for _ in range(queries):
                words = rng.choice(texts[: size - WINDOW]).split()
                query = " ".join(rng.sample(words, max(2, len(words) // 2)))
                began = time.perf_counter()
                found = await recall.search(SID, query, 5, before=before)
                ours_ms.append((time.perf_counter() - began) * 1000)
                vector = (await LocalEmbedder().embed([query]))[0]
                began = time.perf_counter()
                scores = matrix[: size - WINDOW] @ vector
                best = np.argpartition(-scores, 5)[:5]
                best = best[np.argsort(-scores[best])]
                floor_ms.append((time.perf_counter() - began) * 1000)
                agree += int(int(first) + int(best[0])) in {r.message_id for r in found}
            results.update(
                ours_p50_ms=percentile(ours_ms, 50),
                ours_p99_ms=percentile(ours_ms, 99),
                floor_p50_ms=percentile(floor_ms, 50),
                floor_p99_ms=percentile(floor_ms, 99),
                p99_ratio=percentile(ours_ms, 99) / percentile(floor_ms, 99),
                top1_in_top5=agree / queries,
            )
            await recall.close()
        finally:
            await db.close()
    return results


def report(r: dict[str, float], judged: bool) -> None:
    print(f"semantic recall, one session of {int(r['messages']):,} messages")
    print(
        f"  embedding (local)  ours {r['embed_ours_per_s']:>9,.0f}/s   floor "
        f"{r['embed_floor_per_s']:>9,.0f}/s   slowdown {r['embed_slowdown']:.2f}x"
    )
    print(f"  indexer end to end {r['indexer_per_s']:>9,.0f}/s   (SQL read, embed, SQL write)")
    print(
        f"  index load {r['index_load_s']:.2f} s, graph build {r['graph_build_s']:.1f} s "
        "(once per session and process)"
    )
    print(f"  recall p50  ours {r['ours_p50_ms']:7.2f} ms   floor {r['floor_p50_ms']:7.2f} ms")
    print(
        f"  recall p99  ours {r['ours_p99_ms']:7.2f} ms   floor {r['floor_p99_ms']:7.2f} ms   "
        f"ratio {r['p99_ratio']:.2f}"
    )
    print(f"  exact best in the graph's top 5: {r['top1_in_top5']:.1%}")
    if judged:
        verdict = "met" if r["ours_p99_ms"] < TARGET_P99_MS else "NOT met"
        print(f"  target p99 < {TARGET_P99_MS:.0f} ms: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 messages, no verdict")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    configure_logging("WARNING")
    size, queries, hnsw_min = (10_000, 100, 5_000) if args.quick else (100_000, 400, HNSW_MIN)
    results = asyncio.run(run(size, queries, hnsw_min))
    report(results, judged=not args.quick)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
