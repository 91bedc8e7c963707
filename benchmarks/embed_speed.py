"""Uncached embedding throughput of the benchmark embedders on the same SciFact chunks.

    python benchmarks/embed_speed.py [--n 96] [--rounds 3]

Chunks come from scifact_eval's corpus and chunking; the embedders run alternately, best round
kept (this machine is shared, so the best round is the least disturbed one).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

import _common as C
from scifact_eval import RESULTS, chunker, load_corpus, make_embedder


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    chunk_fn, params = chunker()
    texts = [c.text for _, t in load_corpus() for c in chunk_fn(t)]
    sample = random.Random(7).sample(texts, args.n)
    embedders = {name: make_embedder(name) for name in ("local", "paraphrase-l3")}
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, emb in embedders.items():
            t0 = time.perf_counter()
            emb.embed_documents(sample)
            rate = args.n / (time.perf_counter() - t0)
            best[name] = max(best.get(name, 0.0), rate)
    out = {
        **C.provenance(),
        "sample_chunks": args.n,
        "mean_chars": round(sum(map(len, sample)) / len(sample)),
        "chunking": params,
        "rounds": args.rounds,
        "load_avg_1m": os.getloadavg()[0],
        "passages_per_s": {n: round(r, 1) for n, r in best.items()},
    }
    print(json.dumps(out, indent=1))
    (RESULTS / "embed_speed.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
