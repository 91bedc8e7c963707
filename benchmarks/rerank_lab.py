"""Prototype grid for the second-stage rerank (issue 23), on the TUNE splits only.

Reads the candidates ``retrieval_lab.py --split tune --dump --no-save --no-cli`` pickled into
the benchmark cache (``prepared-<set>-tune.pkl``), reorders the hybrid top N with candidate
signals and prints nDCG@10 / MRR@6 per set and the smallest lead over max(dense, BM25):

- sentence windows: the best cosine of the question against the passage's sentence windows
  (``marginalia_core.retrieval.rerank.sentence_windows``; vectors from the embedding cache);
- neighbours: the fused score of the passage before / after it in the same document;
- title / heading: BM25-like overlap of the question with the document title and the heading
  above the passage.

    cd benchmarks && PYTHONPATH=.. python rerank_lab.py [--sets scifact squad pdfs pdfs_hard]
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import retrieval_lab as L

from marginalia_core.retrieval import evaluation as ev
from marginalia_core.retrieval import lexical
from marginalia_core.retrieval import rerank as rr
from marginalia_core.retrieval.retriever import hits_from

K = L.TOP_K
LIBRARIES = {
    "scifact": L.CACHE_DIR / f"lab-scifact-{L.TARGET}-{L.OVERLAP}.sqlite",
    "squad": L.CACHE_DIR / f"lab-squad-{L.TARGET}-{L.OVERLAP}.sqlite",
    "pdfs": L.CACHE_DIR / "lab-pdfs.sqlite",
    "pdfs_hard": L.CACHE_DIR / "lab-pdfs-hard.sqlite",
}


def load(name: str, split: str = "tune"):
    with open(L.CACHE_DIR / f"prepared-{name}-{split}.pkl", "rb") as f:
        return pickle.load(f)


def metrics(prepared, orders) -> dict[str, float]:
    res = []
    for q, ranked in zip(prepared.qset.questions, orders, strict=True):
        res.append(ev.score_question(q, ev.rank_units(hits_from(ranked, prepared.chunks), q), K))
    m = ev.summarize(res, K)
    return {"ndcg": m["ndcg@10"], "mrr": m[f"mrr@{K}"], "hit1": m["hit@1"]}


class Features:
    """Per question: the hybrid table and each top-N passage's signals."""

    def __init__(self, prepared, emb, depth: int, store=None, keep: int = 0):
        self.prepared = prepared
        self.tables, self.maxsim, self.qv, self.title = [], [], [], []
        self.cands = {}
        texts: list[str] = []
        per_q = []
        for c in prepared.candidates:
            table = c.table()
            self.tables.append(table)
            self.cands[id(table)] = c
            top = table[:depth]
            weights = lexical.term_weights(store.conn, c.query) if store is not None else {}
            wins = [rr.best_windows(rr.sentence_windows(prepared.chunks[r.chunk_id]["content"]),
                                    weights, keep) for r in top]
            per_q.append(wins)
            texts += [w for ws in wins for w in ws]
            self.title.append([rr.title_share(weights, rr.document_title(
                prepared.chunks[r.chunk_id]["document_name"])) for r in top])
        t0 = time.perf_counter()
        vecs = emb.cache.get(texts, emb.inner.embed_documents, progress=lambda d, n, s: print(
            f"  windows {d}/{n} in {s:.0f} s", file=sys.stderr, flush=True))
        print(f"{prepared.qset.name}: {len(texts)} windows ({time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)
        pos = 0
        for q, wins in zip(prepared.qset.questions, per_q, strict=True):
            qv = emb.embed_batch([q.text], query=True)[0]
            sims = []
            for ws in wins:
                v = vecs[pos : pos + len(ws)]
                pos += len(ws)
                sims.append(float((v @ qv).max()) if len(ws) else 0.0)
            self.maxsim.append(sims)


def combine(fused: Sequence[float] | np.ndarray, maxsim: Sequence[float] | np.ndarray,
            weight: float, *, how: str = "tmm") -> np.ndarray:
    """The reranked score of passages with ``fused`` scores and sentence ``maxsim`` cosines.

    ``how``: "tmm" divides each signal by its maximum over these passages (theoretical minimum
    0, as the fusion normalises), "minmax" maps each to [0, 1]."""
    f = np.asarray(fused, dtype=np.float64)
    m = np.asarray(maxsim, dtype=np.float64)

    def norm(x: np.ndarray) -> np.ndarray:
        if not len(x):
            return x
        if how == "minmax":
            lo, hi = float(x.min()), float(x.max())
            return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)
        hi = float(x.max())
        return x / hi if hi > 0 else np.zeros_like(x)

    return (1.0 - weight) * norm(f) + weight * norm(np.clip(m, 0.0, None))



def refuse(feat: Features, table, top, ms, how: str, w: float):
    """Fuse again with each top passage's dense score replaced by a mix of its whole-passage
    cosine and its best window: ``how`` refuse-max (max of the two), refuse-mix
    ((1 - w) * cosine + w * window)."""
    c = feat.cands[id(table)]
    best = {r.chunk_id: float(m) for r, m in zip(top, ms, strict=False)}
    cos = []
    for cid, x in zip(c.chunk_ids, c.cosine, strict=True):
        m = best.get(cid)
        if m is None:
            cos.append(x)
        elif how == "refuse-max":
            cos.append(max(x, m))
        else:
            cos.append((1 - w) * x + w * m)
    t = replace(c, cosine=cos).table()
    keep = {r.chunk_id for r in top}
    return [r for r in t if r.chunk_id in keep] + [r for r in table if r.chunk_id not in keep]


def reorder(feat: Features, *, depth: int, w_sent: float, w_nb: float, how: str,
            w_title: float = 0.0):
    orders = []
    for table, sims, titles in zip(feat.tables, feat.maxsim, feat.title, strict=True):
        top, rest = table[:depth], table[depth:]
        if not top:
            orders.append(table)
            continue
        fused = np.array([r.fused for r in top])
        ms = np.array(sims[: len(top)])
        chunks = feat.prepared.chunks
        if how == "surplus":  # fused + w * (best window - whole passage cosine)
            cos = np.array([r.cosine for r in top])
            score = fused + w_sent * (ms - cos)
            order = sorted(range(len(top)), key=lambda i: -score[i])
            orders.append([top[i] for i in order] + rest)
            continue
        if how.startswith("refuse"):  # the windows' max-sim as the dense score, fused again
            orders.append(refuse(feat, table, top, ms, how, w_sent))
            continue
        score = combine(fused, ms, w_sent, how=how)
        if w_title:
            score = score + w_title * np.array(titles[: len(top)])
        if w_nb:
            key = {(chunks[r.chunk_id]["document_id"], chunks[r.chunk_id]["idx"]): i
                   for i, r in enumerate(top)}
            nb = np.zeros(len(top))
            for i, r in enumerate(top):
                d, x = chunks[r.chunk_id]["document_id"], chunks[r.chunk_id]["idx"]
                near = [score[key[(d, x + s)]] for s in (-1, 1) if (d, x + s) in key]
                nb[i] = max(near, default=0.0)
            score = score + w_nb * nb
        order = sorted(range(len(top)), key=lambda i: -score[i])
        orders.append([top[i] for i in order] + rest)
    return orders


def baselines(prepared, retriever_like) -> dict[str, dict[str, float]]:
    out = {}
    for mode in ("dense", "lexical-raw", "hybrid"):
        orders = []
        for c in prepared.candidates:
            t = c.table()
            if mode == "dense":
                t = sorted(t, key=lambda r: r.dense_rank)
            elif mode == "lexical-raw":
                t = sorted([r for r in t if r.lexical_rank is not None],
                           key=lambda r: r.lexical_rank or 0)
            orders.append(t)
        out[mode] = metrics(prepared, orders)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", nargs="*", default=["pdfs", "pdfs_hard", "squad", "scifact"])
    ap.add_argument("--split", default="tune")
    ap.add_argument("--depth", type=int, nargs="*", default=[30])
    ap.add_argument("--w-sent", type=float, nargs="*", default=[0, 0.2, 0.3, 0.4, 0.5, 0.6])
    ap.add_argument("--w-nb", type=float, nargs="*", default=[0, 0.1, 0.2])
    ap.add_argument("--how", nargs="*", default=["tmm", "minmax"])
    ap.add_argument("--w-title", type=float, nargs="*", default=[0, 0.05, 0.1, 0.2])
    ap.add_argument("--max-questions", type=int, default=0)
    ap.add_argument("--keep", type=int, default=0, help="windows per passage (0: all)")
    args = ap.parse_args(argv)
    emb = L.CachedEmbedder()
    feats, base = {}, {}
    for name in args.sets:
        prepared = load(name, args.split)
        if args.max_questions:
            n = args.max_questions
            prepared = ev.Prepared(ev.QuestionSet(prepared.qset.name, prepared.qset.questions[:n]),
                                   prepared.candidates[:n], prepared.chunks)
        store = L.Store(LIBRARIES[name]) if LIBRARIES[name].exists() else None
        feats[name] = Features(prepared, emb, max(args.depth), store, args.keep)
        base[name] = baselines(prepared, None)
        print(name, {k: {m: round(v, 4) for m, v in d.items()} for k, d in base[name].items()},
              flush=True)
    rows = []
    for depth, ws, wn, how, wt in itertools.product(args.depth, args.w_sent, args.w_nb, args.how,
                                                    args.w_title):
        if ws == 0 and how != args.how[0]:
            continue
        row = {"depth": depth, "w_sent": ws, "w_nb": wn, "how": how, "w_title": wt}
        leads = []
        for name, f in feats.items():
            m = metrics(f.prepared, reorder(f, depth=depth, w_sent=ws, w_nb=wn, how=how,
                                            w_title=wt))
            row[name] = m
            best = max(base[name]["dense"]["ndcg"], base[name]["lexical-raw"]["ndcg"])
            best_mrr = max(base[name]["dense"]["mrr"], base[name]["lexical-raw"]["mrr"])
            leads += [m["ndcg"] - best, m["mrr"] - best_mrr]
        row["min_lead"] = min(leads)
        rows.append(row)
        print(f"d{depth} ws{ws} wn{wn} wt{wt} {how}: " + "  ".join(
            f"{n} {row[n]['ndcg']:.4f}/{row[n]['mrr']:.4f}" for n in feats)
            + f"  min lead {row['min_lead']:+.4f}", flush=True)
    best = max(rows, key=lambda r: r["min_lead"])
    print("best by smallest lead:", best)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
