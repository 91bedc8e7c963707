"""Similar-length batches in the local embedder against fixed batches of 16, same run.

The offline answerer embeds up to 18 candidate sentences per question (10 to 80 tokens); in one
batch each is padded to the longest, so most of the model's work was padding. The local
embedder now ends a batch where the next text (sorted by length) is over ``PAD_RATIO`` times the
batch's shortest. This times both on the same texts, interleaved: random draws of 18 sentences
of a SQuAD article (the answerer's case) and 48 passages of 1,400 characters (ingestion's).

    PYTHONPATH=. python benchmarks/bench_embed_padding.py
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import _common as C  # noqa: E402
import squad_answers as sa  # noqa: E402

from marginalia_core.ingest.chunking import chunk_text  # noqa: E402
from marginalia_core.providers.answerers.extractive import SENTENCE_END_RE  # noqa: E402
from marginalia_core.providers.embeddings import local  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "embed_padding.json"
ARTICLES = ("Normans", "Kenya")  # tune articles of the selector (speed only: no answer is read)
SENTENCES_PER_QUESTION = 18  # extractive.MAX_EMBEDDED + EXTRA_EMBEDDED
ROUNDS = 40
PASSAGE_ROUNDS = 3


def fixed(embedder: local.LocalEmbedder, texts: Sequence[str]) -> np.ndarray:
    """The former ``embed_documents``: length-sorted batches of ``batch_size``, nothing more
    (the same batching with no length ratio to end a batch)."""
    out = np.zeros((len(texts), embedder.dimension), dtype=np.float32)
    for idxs in local.similar_length_batches([len(t) for t in texts], embedder.batch_size,
                                             ratio=math.inf):
        out[idxs] = embedder.embed_batch([texts[i] for i in idxs], query=False)
    return out


def timed(fn: Callable[[Sequence[str]], object], texts: Sequence[str]) -> float:
    start = time.perf_counter()
    fn(texts)
    return 1000 * (time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args(argv)
    embedder = local.LocalEmbedder()
    texts = sa.load_articles(ARTICLES)
    sentences = [s for t in texts.values() for s in SENTENCE_END_RE.split(t) if len(s) > 20]
    passages = [c.text for t in texts.values() for c in chunk_text(t)][:48]
    rng = random.Random(26)
    ways = {"fixed batches of 16": lambda b: fixed(embedder, b),
            f"similar-length batches (PAD_RATIO {local.PAD_RATIO})": embedder.embed_documents}
    for way in ways.values():  # warm up; and both give the same vectors
        way(sentences[:SENTENCES_PER_QUESTION])
    a, b = (way(sentences[:SENTENCES_PER_QUESTION]) for way in ways.values())
    assert np.allclose(a, b, atol=1e-4), "the batching changed the vectors"
    per_question: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(args.rounds):
        draw = rng.sample(sentences, SENTENCES_PER_QUESTION)
        for name, way in ways.items():
            per_question[name].append(timed(way, draw))
    per_passages: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(PASSAGE_ROUNDS):
        for name, way in ways.items():
            per_passages[name].append(timed(way, passages))
    out = {
        **C.provenance(),
        "command": "PYTHONPATH=. python benchmarks/bench_embed_padding.py "
                   + " ".join(sys.argv[1:] if argv is None else argv),
        "articles": list(ARTICLES),
        "sentences_ms": {k: {"p50": round(statistics.median(v), 1),
                             "p90": round(float(np.percentile(v, 90)), 1), "rounds": len(v)}
                         for k, v in per_question.items()},
        "passages_48_ms": {k: {"min": round(min(v)), "p50": round(statistics.median(v))}
                           for k, v in per_passages.items()},
    }
    print(json.dumps(out, indent=1))
    RESULTS.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
