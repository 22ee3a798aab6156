"""Recall quality and embedding throughput of each local embedder, on a labelled set of
paraphrase pairs in several languages.

    .venv/bin/python bench/recall_quality.py [--quick] [--json FILE]

1. Quality: every query of tests/data/paraphrases.jsonl (English, Chinese, Japanese, Russian,
   Spanish, German, French, and pairs across two languages) searched against all the targets
   as the corpus; recall@1, recall@5 and MRR of its own target, recall@5 per language. The
   floor is the hashed-trigram embedder (lexical only), run on the same set.
2. The threshold: at each embedder's default `AGENVOY_RECALL_MIN_SCORE`, the share of
   paraphrase pairs it keeps and the share of unrelated pairs (a query and another pair's
   target) it lets through.
3. Speed, through `embed` as the gateway calls it (a thread hand-off per call): texts/s in
   batches of 256 (what the background indexer sends), one text at a time (a recall's query;
   p50 and p99 per call), and the time to load the model (once per process).

The local model runs when the `embeddings` extra is installed; without it, the hashed
embedder alone is measured and the run says so. --quick takes fewer timing rounds (the
quality figures are the same). The exit status is 0 when the run finishes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from gateway.logs import configure_logging
from gateway.memory.embedders import (
    Embedder,
    LocalEmbedder,
    SemanticEmbedder,
    semantic_model_installed,
)

PAIRS = Path(__file__).resolve().parents[1] / "tests" / "data" / "paraphrases.jsonl"
BATCH = 256  # the background indexer's batch (gateway/memory/indexer.py)


def load_pairs() -> list[dict[str, str]]:
    with PAIRS.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def group(lang: str) -> str:
    return "cross" if ">" in lang else lang


def quality(
    pairs: list[dict[str, str]], queries: np.ndarray, targets: np.ndarray
) -> dict[str, Any]:
    scores = queries @ targets.T
    own = np.diag(scores)
    # Rank of each query's own target: how many targets score strictly higher.
    ranks = (scores > own[:, None]).sum(axis=1)
    per_lang: dict[str, list[bool]] = defaultdict(list)
    for pair, rank in zip(pairs, ranks, strict=True):
        per_lang[group(pair["lang"])].append(bool(rank < 5))
    unrelated = scores[~np.eye(len(pairs), dtype=bool)]
    return {
        "recall_at_1": float(np.mean(ranks < 1)),
        "recall_at_5": float(np.mean(ranks < 5)),
        "mrr": float(np.mean(1.0 / (ranks + 1))),
        "per_language_recall_at_5": {k: float(np.mean(v)) for k, v in per_lang.items()},
        "own_scores": own,
        "unrelated_scores": unrelated,
    }


async def speed(embedder: Embedder, texts: list[str], rounds: int, singles: int) -> dict[str, Any]:
    corpus = (texts * (1 + 4 * BATCH // len(texts)))[: 4 * BATCH]
    per_s: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(0, len(corpus), BATCH):
            await embedder.embed(corpus[i : i + BATCH])
        per_s.append(len(corpus) / (time.perf_counter() - start))
    calls: list[float] = []
    for text in texts[:singles]:
        start = time.perf_counter()
        await embedder.embed([text])
        calls.append(time.perf_counter() - start)
    calls.sort()
    return {
        "batch_per_s": statistics.median(per_s),
        "single_per_s": len(calls) / sum(calls),
        "single_p50_ms": 1000 * calls[len(calls) // 2],
        "single_p99_ms": 1000 * calls[min(len(calls) - 1, round(0.99 * (len(calls) - 1)))],
    }


async def measure(embedder: Embedder, pairs: list[dict[str, str]], quick: bool) -> dict[str, Any]:
    load_s = 0.0
    if isinstance(embedder, SemanticEmbedder):
        start = time.perf_counter()
        await embedder.load()
        load_s = time.perf_counter() - start
    queries = await embedder.embed([p["query"] for p in pairs])
    targets = await embedder.embed([p["target"] for p in pairs])
    found = quality(pairs, queries, targets)
    own, unrelated = found.pop("own_scores"), found.pop("unrelated_scores")
    threshold = embedder.min_score
    found["threshold"] = threshold
    found["pairs_kept"] = float(np.mean(own >= threshold))
    found["unrelated_kept"] = float(np.mean(unrelated >= threshold))
    texts = [p["target"] for p in pairs] + [p["query"] for p in pairs]
    rounds, singles = (1, 100) if quick else (5, len(texts))
    found.update(await speed(embedder, texts, rounds, singles))
    found["load_s"] = load_s
    found["model"] = embedder.model
    found["label"] = embedder.label
    return found


async def run(quick: bool) -> dict[str, dict[str, Any]]:
    pairs = load_pairs()
    embedders: dict[str, Embedder] = {"hashed": LocalEmbedder()}
    if semantic_model_installed():
        embedders["local model"] = SemanticEmbedder()
    else:
        print("the embeddings extra is not installed: hashed trigrams only", file=sys.stderr)
    results = {}
    for name, embedder in embedders.items():
        print(f"{name}...", file=sys.stderr)
        results[name] = await measure(embedder, pairs, quick)
    results["set"] = {"pairs": len(pairs)}
    return results


def report(results: dict[str, dict[str, Any]]) -> None:
    names = [n for n in results if n != "set"]
    print(
        f"recall quality, {results['set']['pairs']} paraphrase pairs (tests/data/paraphrases.jsonl)"
    )
    rows = [
        ("recall@1", "recall_at_1", "{:.3f}"),
        ("recall@5", "recall_at_5", "{:.3f}"),
        ("MRR", "mrr", "{:.3f}"),
        ("default threshold", "threshold", "{:.2f}"),
        ("  paraphrases kept", "pairs_kept", "{:.1%}"),
        ("  unrelated let through", "unrelated_kept", "{:.2%}"),
        ("embeddings/s, batches of 256", "batch_per_s", "{:,.0f}"),
        ("embeddings/s, one at a time", "single_per_s", "{:,.0f}"),
        ("  one text p50 ms", "single_p50_ms", "{:.2f}"),
        ("  one text p99 ms", "single_p99_ms", "{:.2f}"),
        ("model load s", "load_s", "{:.2f}"),
    ]
    width = 32
    print(f"  {'':<{width}}" + "".join(f"{n:>14}" for n in names))
    for title, key, fmt in rows:
        print(f"  {title:<{width}}" + "".join(f"{fmt.format(results[n][key]):>14}" for n in names))
    langs = list(results[names[0]]["per_language_recall_at_5"])
    for lang in langs:
        cells = "".join(f"{results[n]['per_language_recall_at_5'][lang]:>14.3f}" for n in names)
        print(f"  {'  recall@5 ' + lang:<{width}}" + cells)
    for n in names:
        print(f"  {n}: {results[n]['label']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer timing rounds")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    configure_logging("WARNING")
    results = asyncio.run(run(args.quick))
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
