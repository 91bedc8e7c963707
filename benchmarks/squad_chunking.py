"""SQuAD chunking study: which TARGET / OVERLAP puts the answer in the top-ranked chunks.

    python benchmarks/squad_chunking.py           # 7 articles, 1,204 questions, 6 configs
    python benchmarks/squad_chunking.py --quick   # Amazon_rainforest only, 40 questions
    python benchmarks/squad_chunking.py --articles Geology Rhine --targets 1400 --overlaps 0,200

For every SQuAD v1.1 dev question of the chosen articles (``articles_derived.jsonl`` text,
questions and answers from ``dev-v1.1.json``, read from ../shared/eval and never copied), each
article is chunked with ``marginalia_core.ingest.chunking.chunk_text`` at TARGET x OVERLAP, and the
question's chunks *of its own article* are ranked:

- ``dense``: cosine with the local MiniLM embedder (the offline default);
- ``lexical``: ``lexical.bm25_search`` over the project's FTS5 table, restricted to the article;
- ``hybrid``: as ``retrieval.Retriever._hybrid`` does it: dense top 200 + BM25 top 200, each
  completed with the other signal's score (``lexical.filled_lists``, when present), then
  ``lexical.fuse``; BM25 restricted to the article throughout.

A chunk "contains the answer" when it contains a gold answer span: SQuAD's paragraph
``answer_start`` offsets map exactly into the article text (articles_derived joins the
paragraphs with a blank line; ``_common.load_squad`` checks that), so the test is positional —
``chunk.start <= span.start and span.end <= chunk.end`` for any gold answer. Reported per config
and mode: recall@1 and recall@5, plus ``coverage`` (some chunk of the article contains a whole
span: overlap 0 cuts spans in two), chunk count and mean length, the share of chunks longer
than the embedder's 256-token window (their tail is never embedded), and chance-level recall
(how often a random chunk / 5 random chunks would contain a span), because bigger chunks
trivially contain more spans. No threshold is applied (this ranks within one article).

The articles go through ``Store.add_document`` into a temporary SQLite file per config (the
FTS5 triggers fill ``chunks_fts``); vectors are cached by content in benchmarks/.cache
(``_cache.EmbeddingCache``, shared with the other benchmarks), so only the first run embeds
(~1,000 chunks at ~8-12 passages/s on 2 cores).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
import numpy as np
from _cache import EmbeddingCache

from marginalia_core.ingest.chunking import chunk_text, effective_overlap
from marginalia_core.retrieval import lexical
from marginalia_core.store.sqlite import Store

ARTICLES = ["Amazon_rainforest", "Geology", "Packet_switching", "Black_Death", "Oxygen",
            "Prime_number", "Rhine"]
QUICK_ARTICLES = ["Amazon_rainforest"]
QUICK_QUESTIONS = 40
TARGETS = [800, 1400, 2000]
OVERLAPS = [0, 200]
CANDIDATES = 200  # retrieval.LEXICAL_CANDIDATES / lexical.CANDIDATES
SEED = 11


def chance(n: int, g: int, k: int) -> float:
    """P(at least one of k random distinct chunks out of n is among the g good ones)."""
    if g <= 0:
        return 0.0
    if n - g < k:
        return 1.0
    return 1.0 - math.comb(n - g, k) / math.comb(n, k)


def contains(chunk: Any, q: dict[str, Any]) -> bool:
    if q["spans"]:
        return any(chunk.start <= s and e <= chunk.end for s, e in q["spans"])
    low = chunk.text.lower()
    return any(a.lower() in low for a in q["answers"])


def embed_queries(emb: Any, texts: list[str]) -> np.ndarray:
    out = [emb.embed_batch(texts[i : i + 16], query=True) for i in range(0, len(texts), 16)]
    return np.vstack(out) if out else np.zeros((0, emb.dimension), dtype=np.float32)


def evaluate(target: int, overlap: int, articles: dict[str, Any], questions: dict[str, list[dict]],
             emb: Any, cache: EmbeddingCache, qvecs: dict[str, np.ndarray], tmp: Path) -> dict[str, Any]:
    from marginalia_core.providers.embeddings.local import MAX_TOKENS

    t0 = time.perf_counter()
    store = Store(tmp / f"squad-{target}-{overlap}.db")
    per_article: dict[str, tuple[list[Any], np.ndarray, np.ndarray]] = {}
    lengths: list[int] = []
    tokens: list[int] = []
    embedded_before = len(cache)
    for aid in articles:
        text = articles[aid]["text"]
        chunks = chunk_text(text, target=target, overlap=overlap)
        vecs = cache.get([c.text for c in chunks], lambda b: emb.embed_documents(b), role="document",
                         progress=lambda d, t, s, aid=aid: C.log(f"[squad] {target}/{overlap} {aid}: embedded {d}/{t} ({s:.0f} s)"))
        doc = store.add_document(
            name=f"{aid}.txt", mime="text/plain", size=len(text.encode()),
            content_hash=hashlib.sha256(f"{aid}-{target}-{overlap}".encode()).hexdigest(),
            embed_model=emb.model, embed_dim=emb.dimension, chunks=chunks, embeddings=vecs,
            chunk_target=target, chunk_overlap=overlap, text=text,
        )
        ids = np.array([r.id for r in store.document_chunks(doc.id)], dtype=np.int64)
        per_article[aid] = (chunks, ids, vecs)
        lengths += [len(c.text) for c in chunks]
        tokens += C.token_counts(emb, [c.text for c in chunks])
    build_s = time.perf_counter() - t0

    hits = {m: {"at1": 0, "at5": 0} for m in ("dense", "lexical", "hybrid")}
    orig_bm25 = lexical.bm25_search
    covered = 0
    chance1 = chance5 = 0.0
    n_q = 0
    for aid, qs in questions.items():
        chunks, ids, vecs = per_article[aid]
        id_pos = {int(cid): i for i, cid in enumerate(ids)}
        qv = qvecs[aid]
        for qi, q in enumerate(qs):
            good = {i for i, c in enumerate(chunks) if contains(c, q)}
            n_q += 1
            covered += bool(good)
            chance1 += len(good) / len(chunks)
            chance5 += chance(len(chunks), len(good), 5)
            scores = vecs @ qv[qi]
            dense_order = np.lexsort((np.arange(len(scores)), -scores))
            dense = [(int(ids[i]), float(scores[i])) for i in dense_order[:CANDIDATES]]
            lex = lexical.bm25_search(store.conn, q["question"], limit=CANDIDATES, chunk_ids=ids.tolist())
            if hasattr(lexical, "filled_lists"):
                # as retrieval.Retriever._hybrid: both lists completed with the other signal's
                # exact score before fusion (BM25 restricted to this article's chunks)
                cos = dict(zip(ids.tolist(), scores.tolist()))
                art_ids = ids.tolist()

                def bm25_in_article(conn, query, *, limit=CANDIDATES, chunk_ids=None, _ids=art_ids, **kw):
                    return orig_bm25(conn, query, limit=limit, chunk_ids=_ids if chunk_ids is None else chunk_ids, **kw)

                lexical.bm25_search = bm25_in_article
                try:
                    d_full, l_full = lexical.filled_lists(store.conn, q["question"], dense,
                                                          lambda cids, cos=cos: [cos.get(c) for c in cids])
                finally:
                    lexical.bm25_search = orig_bm25
                fused = lexical.fuse(d_full, l_full)
            else:
                fused = lexical.fuse(dense, lex)
            rankings = {
                "dense": [id_pos[c] for c, _ in dense],
                "lexical": [id_pos[c] for c, _ in lex],
                "hybrid": [id_pos[c] for c, _ in fused],
            }
            for mode, order in rankings.items():
                if order[:1] and order[0] in good:
                    hits[mode]["at1"] += 1
                if good.intersection(order[:5]):
                    hits[mode]["at5"] += 1
    store.close()
    lengths_arr = np.array(lengths)
    out: dict[str, Any] = {
        "target": target,
        "overlap": overlap,
        "effective_overlap": effective_overlap(target, overlap),
        "chunks": len(lengths),
        "mean_chunk_chars": round(float(lengths_arr.mean()), 1),
        "median_chunk_chars": int(np.median(lengths_arr)),
        "mean_tokens": round(float(np.mean(tokens)), 1),
        "share_over_256_tokens": round(float(np.mean(np.array(tokens) > MAX_TOKENS)), 3),
        "context_chars_top5": round(5 * float(lengths_arr.mean())),
        "questions": n_q,
        "coverage": round(covered / n_q, 4),
        "chance_at_1": round(chance1 / n_q, 4),
        "chance_at_5": round(chance5 / n_q, 4),
        "newly_embedded": len(cache) - embedded_before,
        "seconds": round(time.perf_counter() - t0, 1),
        "build_seconds": round(build_s, 1),
    }
    for mode, h in hits.items():
        out[mode] = {"recall_at_1": round(h["at1"] / n_q, 4), "recall_at_5": round(h["at5"] / n_q, 4)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--articles", nargs="+")
    ap.add_argument("--targets", help="comma-separated, default 800,1400,2000")
    ap.add_argument("--overlaps", help="comma-separated, default 0,200")
    ap.add_argument("--max-questions", type=int, help="per run, fixed-seed sample")
    args = ap.parse_args()
    custom = bool(args.articles or args.targets or args.overlaps or args.max_questions)
    run = "custom" if custom else ("quick" if args.quick else "full")
    names = args.articles or (QUICK_ARTICLES if args.quick else ARTICLES)
    targets = [int(x) for x in args.targets.split(",")] if args.targets else TARGETS
    overlaps = [int(x) for x in args.overlaps.split(",")] if args.overlaps else OVERLAPS
    max_q = args.max_questions or (QUICK_QUESTIONS if args.quick else None)

    all_articles, all_questions = C.load_squad()
    articles = {a: all_articles[a] for a in names}
    questions = {a: all_questions[a] for a in names}
    if max_q:
        flat = [(a, q) for a in names for q in questions[a]]
        keep = random.Random(SEED).sample(flat, min(max_q, len(flat)))
        questions = {a: [q for b, q in keep if b == a] for a in names}
    questions = {a: qs for a, qs in questions.items() if qs}

    from marginalia_core.providers.embeddings.local import LocalEmbedder

    t_start = time.perf_counter()
    emb = LocalEmbedder()
    cache = EmbeddingCache(emb.key, emb.dimension)
    qvecs = {a: cache.get([q["question"] for q in qs], lambda b: embed_queries(emb, b), role="query")
             for a, qs in questions.items()}
    tmp = Path(tempfile.mkdtemp(prefix="bench-squad-"))
    configs = []
    try:
        for target in targets:
            for overlap in overlaps:
                r = evaluate(target, overlap, articles, questions, emb, cache, qvecs, tmp)
                configs.append(r)
                C.log(f"[squad] {target}/{overlap}: {r['chunks']} chunks (mean {r['mean_chunk_chars']} chars), "
                      f"coverage {r['coverage']:.3f}, dense R@1 {r['dense']['recall_at_1']:.3f} R@5 {r['dense']['recall_at_5']:.3f}, "
                      f"hybrid R@1 {r['hybrid']['recall_at_1']:.3f} R@5 {r['hybrid']['recall_at_5']:.3f} ({r['seconds']} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res = {
        "articles": names,
        "article_chars": {a: len(articles[a]["text"]) for a in names},
        "questions": sum(len(qs) for qs in questions.values()),
        "span_mapping": "exact offsets (paragraph answer_start + paragraph offset in the joined text)",
        "embedder": emb.key,
        "hybrid": {"fusion": lexical.FUSION, "normalization": lexical.NORMALIZATION, "alpha": lexical.ALPHA,
                   "candidates": CANDIDATES, "filled_lists": hasattr(lexical, "filled_lists")},
        "configs": configs,
        "seconds_total": round(time.perf_counter() - t_start, 1),
    }
    path = C.write_result("squad_chunking", run, res)
    print(json.dumps({"written": str(path.relative_to(C.REPO)), "run": run, "seconds": res["seconds_total"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
