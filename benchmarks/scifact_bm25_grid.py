"""Does BM25's k1/b matter enough to replace FTS5's fixed bm25() (k1 1.2, b 0.75)?

    python benchmarks/scifact_bm25_grid.py [--split train]

Re-scores chunks in numpy with FTS5's own tokens (read back through an ``fts5vocab`` instance
table over the database scifact_eval.py built) and FTS5's formula, for a grid of k1/b; checks
that k1 1.2 / b 0.75 reproduces ``bm25_search``; prints nDCG@10 per setting, BM25 alone and
fused with dense by the default fusion. Train split only by default (this is tuning).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from collections import defaultdict

import numpy as np
from _cache import EmbeddingCache
from scifact_eval import (
    CACHE_DIR,
    CANDIDATES,
    doc_ranking,
    evaluate,
    load_qrels,
    load_queries,
    make_embedder,
)

from marginalia_core.retrieval import lexical


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="train", choices=["train", "test"])
    ap.add_argument("--db", default=None)
    args = ap.parse_args()
    emb = make_embedder("local")
    db = args.db or str(CACHE_DIR / f"scifact-{emb.model}-1400-200.sqlite")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.v USING fts5vocab(main, chunks_fts, instance)"
    )
    rows = conn.execute("SELECT id, document_id, embedding FROM chunks ORDER BY id").fetchall()
    ids = np.array([r[0] for r in rows])
    docs = sorted({r[1] for r in rows})
    pos = {d: i for i, d in enumerate(docs)}
    chunk_doc = np.full(ids.max() + 1, -1)
    for cid, did, _ in rows:
        chunk_doc[cid] = pos[did]
    matrix = np.frombuffer(b"".join(r[2] for r in rows), "<f4").reshape(len(rows), -1)
    row_of = np.full(ids.max() + 1, -1)
    row_of[ids] = np.arange(len(ids))

    t0 = time.perf_counter()
    postings: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    dl = np.zeros(len(ids))
    for term, doc in conn.execute("SELECT term, doc FROM temp.v"):
        postings[term][doc] += 1
        dl[row_of[doc]] += 1
    avgdl, n_docs = dl.mean(), len(ids)
    print(
        f"vocab {len(postings)} terms, {int(dl.sum())} tokens in {time.perf_counter() - t0:.1f}s",
        file=sys.stderr,
    )

    queries = load_queries()
    qrels = load_qrels(args.split)
    cache = EmbeddingCache(emb.key, emb.dimension)
    qids = list(qrels)
    qvecs = cache.get(
        [queries[q] for q in qids], lambda b: emb.embed_batch(b, query=True), role="query"
    )
    # query terms exactly as FTS5 sees them: the stemmed tokens of the MATCH phrases
    conn.execute(
        "CREATE VIRTUAL TABLE temp.qt USING fts5(x, tokenize='porter unicode61 remove_diacritics 2')"
    )
    conn.execute("CREATE VIRTUAL TABLE temp.qv USING fts5vocab(temp, qt, instance)")
    qterms = {}
    for q in qids:
        conn.execute("DELETE FROM temp.qt")
        conn.execute(
            "INSERT INTO temp.qt(x) VALUES (?)", (" ".join(lexical.query_terms(queries[q])),)
        )
        qterms[q] = [t for (t,) in conn.execute("SELECT term FROM temp.qv ORDER BY offset")]

    def bm25(q, k1, b):
        scores = np.zeros(len(ids))
        for t in qterms[q]:
            p = postings.get(t)
            if not p:
                continue
            n = len(p)
            idf = np.log((n_docs - n + 0.5) / (n + 0.5))
            idf = idf if idf > 0 else 1e-6
            rows_ = row_of[np.fromiter(p.keys(), int)]
            tf = np.fromiter(p.values(), float)
            scores[rows_] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl[rows_] / avgdl))
        return scores

    # check: k1 1.2 / b 0.75 reproduces FTS5's bm25()
    worst = 0.0
    for q in qids[:50]:
        ref = lexical.bm25_search(conn, queries[q], limit=20)
        mine = bm25(q, 1.2, 0.75)
        for cid, s in ref:
            worst = max(worst, abs(mine[row_of[cid]] - s))
    print(f"max |numpy - fts5| over 50 queries' top 20: {worst:.2e}")

    dense = {}
    for q, v in zip(qids, qvecs, strict=True):
        s = matrix @ v
        top = np.argsort(-s, kind="stable")[:CANDIDATES]
        dense[q] = [(int(ids[i]), float(s[i])) for i in top]
    print("| k1 | b | BM25 nDCG@10 | default fusion nDCG@10 | R@100 |\n|---|---|---|---|---|")
    for k1 in (0.6, 0.9, 1.2, 1.5, 2.0):
        for b in (0.3, 0.5, 0.75, 0.9):
            lex_run, fused_run = {}, {}
            for q in qids:
                s = bm25(q, k1, b)
                top = np.argsort(-s, kind="stable")[:1000]
                top = top[s[top] > 0]
                lst = [(int(ids[i]), float(s[i])) for i in top]
                lex_run[q] = doc_ranking(lst, chunk_doc, docs)
                fused_run[q] = doc_ranking(
                    lexical.fuse(dense[q], lst[:CANDIDATES]), chunk_doc, docs
                )
            m1, m2 = evaluate(lex_run, qrels), evaluate(fused_run, qrels)
            print(
                f"| {k1} | {b} | {m1['ndcg@10']:.4f} | {m2['ndcg@10']:.4f} | {m2['recall@100']:.4f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
