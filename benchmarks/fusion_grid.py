"""Fusion variants on the tuning splits, from the candidates ``retrieval_lab.py --dump``
pickled (benchmarks/.cache/prepared-<name>-<split>.pkl): every variant re-ranks the same
candidates, so the grid embeds nothing. Used to choose lexical's fusion defaults on the tune
splits only; the held-out splits are then measured once by retrieval_lab.py.

    python benchmarks/retrieval_lab.py --split tune --dump --no-save
    python benchmarks/fusion_grid.py > benchmarks/results/fusion_grid_tune.txt  # best first

The grid: base weight alpha x adaptive power (0 = the fixed weight) x phrase weight (0 = no
phrase bonus), each row the nDCG@10 of every split and the margin (the smallest lead of hybrid over the better of dense and BM25),
the criterion the default was chosen by.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pickle
import sys

from _cache import CACHE_DIR

from marginalia_core.retrieval import evaluation as ev
from marginalia_core.retrieval import lexical
from marginalia_core.retrieval.retriever import RankedChunk, hits_from

CACHE = CACHE_DIR
NAMES = ("scifact", "squad", "pdfs")
TOP_K = 6


def ndcg(prepared: ev.Prepared, order) -> float:
    total = 0.0
    for q, c in zip(prepared.qset.questions, prepared.candidates, strict=True):
        ranked = [RankedChunk(cid, 0.0, 0.0, 0.0, 0.0, 0, None, 0, False) for cid in order(c)]
        total += ev.score_question(q, ev.rank_units(hits_from(ranked, prepared.chunks), q), TOP_K).ndcg
    return total / max(1, len(prepared.qset.questions))


def dense(c):
    return [i for i, _ in sorted(zip(c.chunk_ids, c.cosine), key=lambda p: -p[1])]


def bm25(c):
    return [i for i, _ in sorted(((i, b) for i, b in zip(c.chunk_ids, c.bm25) if b > 0),
                                 key=lambda p: -p[1])]


def fused(**kw):
    def order(c):
        return [i for i, _ in lexical.fuse(
            list(zip(c.chunk_ids, c.cosine)), list(zip(c.chunk_ids, c.bm25)),
            coverage=dict(zip(c.chunk_ids, c.coverage)), phrase=c.phrase_of(), **kw)]
    return order


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="tune")
    args = ap.parse_args()
    prepared = {}
    for n in NAMES:
        path = CACHE / f"prepared-{n}-{args.split}.pkl"
        if path.exists():
            with open(path, "rb") as f:
                prepared[n] = pickle.load(f)
    base = {n: (ndcg(p, dense), ndcg(p, bm25)) for n, p in prepared.items()}
    print(json.dumps({n: [round(x, 4) for x in v] for n, v in base.items()}))
    rows = []
    for alpha, adapt, pw in itertools.product((0.55, 0.6, 0.65), (0.0, 0.25, 0.5, 0.75),
                                              (0.0, 0.2, 0.3, 0.4, 0.5)):
        scores = {n: ndcg(p, fused(alpha=alpha, adaptive_power=adapt, phrase_weight=pw))
                  for n, p in prepared.items()}
        margin = min(scores[n] - max(base[n]) for n in scores)
        rows.append((margin, alpha, adapt, pw, scores))
        print(f"margin {margin:+.4f} alpha {alpha} adaptive power {adapt} phrase {pw} "
              + " ".join(f"{n} {s:.4f}" for n, s in scores.items()), file=sys.stderr, flush=True)
    rows.sort(key=lambda r: -r[0])
    print(f"# best first; default: alpha {lexical.ALPHA}, adaptive power "
          f"{lexical.ADAPTIVE_POWER}, depth {lexical.ADAPTIVE_DEPTH}, BM25 x coverage, phrase "
          f"{lexical.PHRASE_WEIGHT}")
    for margin, alpha, adapt, pw, scores in rows:
        print(f"margin {margin:+.4f} alpha {alpha} adaptive power {adapt} phrase {pw} "
              + " ".join(f"{n} {s:.4f}" for n, s in scores.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
