"""BEIR SciFact: dense, FTS5 BM25 and hybrid fusions, at document level (best chunk per doc).

    python benchmarks/scifact_eval.py --split train          # tune here (809 queries)
    python benchmarks/scifact_eval.py --split test           # held out (300 queries)
    python benchmarks/scifact_eval.py --split train --quick  # < 60 s smoke run, cold or warm

Documents are ``title + "\\n\\n" + text``, chunked with ``marginalia_core.ingest.chunking.chunk_text``
(TARGET/OVERLAP), embedded with the chosen embedder (vectors cached by content in
benchmarks/.cache), loaded into a real SQLite file through ``Store.add_document`` (the project's
schema, FTS5 triggers included), then ranked per query exactly as ``retrieval.py`` does: cosine
over every chunk, ``lexical.bm25_search`` over ``chunks_fts``, ``lexical.fuse``. A document's
score is its best chunk's score. nDCG@10 and Recall@100 follow BEIR (pytrec_eval): linear gain,
ideal DCG from the judged documents, results whose id equals the query id dropped.

Results go to benchmarks/results/scifact.json (one entry per split/embedder/mode) and a
markdown table to stdout and benchmarks/results/scifact.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _common as C
import numpy as np

REPO = C.REPO

from _cache import CACHE_DIR, EmbeddingCache  # noqa: E402

from marginalia_core.config import Settings  # noqa: E402
from marginalia_core.retrieval import lexical  # noqa: E402
from marginalia_core.retrieval.retriever import Retriever  # noqa: E402
from marginalia_core.store.sqlite import Store  # noqa: E402

DATA = (REPO / ".." / "shared" / "eval" / "scifact").resolve()
if not DATA.exists() and Path("/work/shared/eval/scifact").exists():  # a worktree in /work/wt
    DATA = Path("/work/shared/eval/scifact")
RESULTS = REPO / "benchmarks" / "results"
CANDIDATES = lexical.CANDIDATES  # chunks per list before fusion, as retrieval.py
DEPTH = 100  # documents kept per query (Recall@100)
SPEED_SAMPLE = 96  # chunks embedded uncached to measure passages/s
QUICK_QUERIES = 30
QUICK_RANDOM_DOCS = 100
PROJECT_K = 400  # passages asked of Retriever.search: enough for 100 distinct documents


# --- data ------------------------------------------------------------------------------------


def load_corpus() -> list[tuple[str, str]]:
    docs = []
    with open(DATA / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs.append((str(d["_id"]), (d.get("title") or "") + "\n\n" + (d.get("text") or "")))
    return docs


def load_queries() -> dict[str, str]:
    with open(DATA / "queries.jsonl", encoding="utf-8") as f:
        return {str(q["_id"]): q["text"] for q in map(json.loads, f)}


def load_qrels(split: str) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with open(DATA / "qrels" / f"{split}.tsv", encoding="utf-8", newline="") as f:
        for n, line in enumerate(f):
            parts = line.strip().split("\t")
            if n == 0 and not parts[-1].lstrip("-").isdigit():
                continue  # header row
            if len(parts) < 3:
                continue
            qid, did, rel = parts[0], parts[1], int(parts[2])
            qrels.setdefault(qid, {})[did] = rel
    return qrels


# --- metrics (BEIR / pytrec_eval definitions) ------------------------------------------------


def ndcg_at(ranked: list[str], rels: dict[str, int], k: int = 10) -> float:
    dcg = sum(
        rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if rels.get(d, 0) > 0
    )
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: list[str], rels: dict[str, int], k: int = 100) -> float:
    relevant = {d for d, r in rels.items() if r > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def evaluate(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """Mean nDCG@10 and Recall@100 over the judged queries (a query with no run scores 0)."""
    nd, rc = [], []
    for qid, rels in qrels.items():
        ranked = [d for d in run.get(qid, []) if d != qid]  # BEIR ignore_identical_ids
        nd.append(ndcg_at(ranked, rels, 10))
        rc.append(recall_at(ranked, rels, 100))
    return {"ndcg@10": float(np.mean(nd)), "recall@100": float(np.mean(rc)), "queries": len(nd)}


# --- chunking, embedding, database -----------------------------------------------------------


@dataclass
class _WholeDoc:  # stand-in for chunking.Chunk when chunking.py is absent
    idx: int
    start: int
    end: int
    text: str
    page_start: int = 1
    page_end: int = 1


def chunker(whole: bool = False) -> tuple[Callable[[str], list], dict]:
    if whole:
        return (lambda t: [_WholeDoc(0, 0, len(t), t)]), {
            "chunking": "whole",
            "target": 0,
            "overlap": 0,
        }
    try:
        from marginalia_core.ingest import chunking
    except ImportError:
        print("! marginalia_core.ingest.chunking missing: whole documents", file=sys.stderr)
        return (lambda t: [_WholeDoc(0, 0, len(t), t)]), {
            "chunking": "whole",
            "target": 0,
            "overlap": 0,
        }
    params = {"chunking": "chunk_text", "target": chunking.TARGET, "overlap": chunking.OVERLAP}
    return chunking.chunk_text, params


def make_embedder(name: str):
    if name == "local":
        from marginalia_core.providers.embeddings.local import LocalEmbedder

        return LocalEmbedder()
    if name == "paraphrase-l3":
        from _paraphrase_l3 import ParaphraseL3Embedder

        return ParaphraseL3Embedder()
    raise SystemExit(f"unknown embedder {name!r}")


def progress_printer(label: str):
    def show(done: int, todo: int, seconds: float) -> None:
        rate = done / seconds if seconds else 0.0
        print(f"  {label}: {done}/{todo} embedded, {rate:.1f}/s", file=sys.stderr, flush=True)

    return show


def build_db(path: Path, docs, doc_chunks, vectors, embedder, params) -> sqlite3.Connection:
    """Load every chunk into a fresh SQLite file with the project's schema.

    Uses ``Store.add_document``, so the benchmark exercises the app's own write path.
    """
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    offsets = np.cumsum([0] + [len(c) for c in doc_chunks])
    from marginalia_core.store.sqlite import Store

    store = Store(path)
    for n, ((doc_id, text), chunks) in enumerate(zip(docs, doc_chunks, strict=True)):
        store.add_document(
            name=doc_id,
            mime="text/plain",
            size=len(text.encode()),
            content_hash=hashlib.sha256(f"{doc_id}\0{text}".encode()).hexdigest(),
            embed_model=embedder.model,
            embed_dim=embedder.dimension,
            chunks=chunks,
            embeddings=vectors[offsets[n] : offsets[n + 1]],
            chunk_target=params["target"],
            chunk_overlap=params["overlap"],
            text=text,
            document_id=doc_id,
        )
    store.close()
    how = "Store.add_document"
    print(f"  database: {path} ({how})", file=sys.stderr)
    return sqlite3.connect(path, isolation_level=None)


# --- ranking ---------------------------------------------------------------------------------


def variants() -> list[tuple[str, dict]]:
    """Every fusion setting evaluated: (label, fuse kwargs). Candidates are CANDIDATES each."""
    out: list[tuple[str, dict]] = []
    for k in (1, 5, 10, 20, 40, 60, 100):
        out.append((f"rrf k={k}", {"method": "rrf", "k": k, "weight": 0.5}))
    for w in (0.3, 0.4, 0.6, 0.7):
        for k in (10, 60):
            out.append((f"wrrf w={w} k={k}", {"method": "rrf", "k": k, "weight": w}))
    for norm in ("minmax", "zscore", "tmm"):
        for a in np.round(np.arange(0.2, 0.85, 0.05), 2):
            out.append(
                (
                    f"convex {norm} a={a:.2f}",
                    {"method": "convex", "normalization": norm, "alpha": float(a),
                     "adaptive_power": 0.0},
                )
            )
    return out


def doc_ranking(fused, chunk_doc: np.ndarray, doc_ids: list[str], depth: int = DEPTH) -> list[str]:
    """Chunks best first -> documents best first by their best chunk (first occurrence)."""
    seen: dict[int, None] = {}
    for cid, _ in fused:
        seen.setdefault(int(chunk_doc[cid]), None)
        if len(seen) >= depth:
            break
    return [doc_ids[d] for d in seen]


def run(args) -> dict:
    t_start = time.perf_counter()
    docs = load_corpus()
    queries = load_queries()
    qrels = load_qrels(args.split)
    rng = random.Random(13)
    if args.quick:
        qids = sorted(qrels, key=lambda q: int(q) if q.isdigit() else q)
        qids = rng.sample(qids, min(QUICK_QUERIES, len(qids)))
        qrels = {q: qrels[q] for q in qids}
        judged = {d for rels in qrels.values() for d in rels}
        others = [i for i, (d, _) in enumerate(docs) if d not in judged]
        keep = {i for i, (d, _) in enumerate(docs) if d in judged}
        keep |= set(rng.sample(others, min(QUICK_RANDOM_DOCS, len(others))))
        docs = [docs[i] for i in sorted(keep)]
    doc_ids = [d for d, _ in docs]

    chunk_fn, params = chunker(args.whole)
    t0 = time.perf_counter()
    doc_chunks = [chunk_fn(text) for _, text in docs]
    texts = [c.text for cs in doc_chunks for c in cs]
    t_chunk = time.perf_counter() - t0

    embedder = make_embedder(args.embedder)
    cache_dir = Path(args.cache_dir) if args.cache_dir else CACHE_DIR
    cache = EmbeddingCache(embedder.key, embedder.dimension, root=cache_dir)
    todo = len(cache.missing(texts, "document"))
    print(f"{len(docs)} docs -> {len(texts)} chunks ({params}); {todo} to embed", file=sys.stderr)
    t0 = time.perf_counter()
    vectors = cache.get(texts, embedder.embed_documents, progress=progress_printer("chunks"))
    t_embed = time.perf_counter() - t0
    speed = None
    if not args.quick:  # uncached throughput on a fixed sample of this corpus's chunks
        sample = random.Random(7).sample(texts, min(SPEED_SAMPLE, len(texts)))
        a = time.perf_counter()
        embedder.embed_documents(sample)
        speed = round(len(sample) / (time.perf_counter() - a), 1)
    qids = list(qrels)
    qtexts = [queries[q] for q in qids]
    t0 = time.perf_counter()
    qvecs = cache.get(qtexts, lambda b: embedder.embed_batch(b, query=True), role="query")
    t_qembed = time.perf_counter() - t0

    t0 = time.perf_counter()
    if args.quick:
        db_path = Path(tempfile.mkdtemp(prefix="scifact-quick-")) / "scifact.sqlite"
    else:
        db_path = (
            cache_dir / f"scifact-{embedder.model}-{params['target']}-{params['overlap']}.sqlite"
        )
    conn = build_db(db_path, docs, doc_chunks, vectors, embedder, params)
    # chunk ids in the database -> document index; matrix rows in chunk id order
    rows = conn.execute("SELECT id, document_id, embedding FROM chunks ORDER BY id").fetchall()
    pos = {d: n for n, d in enumerate(doc_ids)}
    max_id = max(r[0] for r in rows)
    chunk_doc = np.full(max_id + 1, -1, dtype=np.int64)
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    row_of = np.full(max_id + 1, -1, dtype=np.int64)
    row_of[ids] = np.arange(len(ids))
    for cid, did, _ in rows:
        chunk_doc[cid] = pos[did]
    matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4").reshape(len(rows), -1)
    assert len(rows) == len(texts)
    t_db = time.perf_counter() - t0

    # per query: the two candidate lists (as retrieval.py builds them) + full dense doc ranking
    t0 = time.perf_counter()
    dense_lists, lex_lists, filled = {}, {}, {}
    runs: dict[str, dict[str, list[str]]] = {"dense": {}, "bm25": {}}
    t_dense = t_lex = 0.0
    for qid, qv in zip(qids, qvecs, strict=True):
        a = time.perf_counter()
        scores = matrix @ qv
        order = np.argsort(-scores, kind="stable")
        t_dense += time.perf_counter() - a
        dense_lists[qid] = [(int(ids[i]), float(scores[i])) for i in order[:CANDIDATES]]
        runs["dense"][qid] = doc_ranking(((int(ids[i]), 0.0) for i in order), chunk_doc, doc_ids)
        a = time.perf_counter()
        lex_lists[qid] = lexical.bm25_search(conn, queries[qid], limit=CANDIDATES)
        t_lex += time.perf_counter() - a
        deep = lexical.bm25_search(conn, queries[qid], limit=1000)
        runs["bm25"][qid] = doc_ranking(deep, chunk_doc, doc_ids)
        # exact other-signal scores for each list's candidates (re-ranking and "filled" fusion)
        lex_cos = [(c, float(scores[row_of[c]])) for c, _ in lex_lists[qid]]
        bm25_all = dict(deep)
        dense_bm25 = [(c, bm25_all.get(c, 0.0)) for c, _ in dense_lists[qid]]
        runs.setdefault("dense over bm25 top-200", {})[qid] = doc_ranking(
            lexical.fuse(lex_cos, None, method="dense"), chunk_doc, doc_ids
        )
        runs.setdefault("bm25 over dense top-200", {})[qid] = doc_ranking(
            lexical.fuse(None, dense_bm25, method="lexical"), chunk_doc, doc_ids
        )
        filled[qid] = (dense_lists[qid] + lex_cos, lex_lists[qid] + dense_bm25)
    t_rank = time.perf_counter() - t0

    t0 = time.perf_counter()
    configs = [("unfilled lists, fuse() defaults", {})] + variants()
    if args.quick:
        configs = configs[:1] + [c for c in configs[1:] if c[0] in QUICK_VARIANTS]
    for label, kw in configs:
        runs[label] = {
            q: doc_ranking(lexical.fuse(dense_lists[q], lex_lists[q], **kw), chunk_doc, doc_ids)
            for q in qids
        }
    for label, kw in FILLED_VARIANTS:
        runs[label] = {
            q: doc_ranking(lexical.fuse(*filled[q], **kw), chunk_doc, doc_ids) for q in qids
        }
    t_fuse = time.perf_counter() - t0

    # the app's own query path end to end: Retriever.search embeds the question, scores the
    # in-memory matrix, fills and fuses the lists exactly as a chat question is answered
    t0 = time.perf_counter()
    store = Store(db_path)
    retriever = Retriever(store, embedder, Settings(db_path=str(db_path)).with_overrides(threshold=-1.0))
    modes = ("hybrid",) if args.quick else ("hybrid", "dense", "lexical")
    for mode in modes:
        runs[f"project {mode} (Retriever.search)"] = {
            q: doc_ranking(
                ((h.chunk_id, h.score) for h in retriever.search(queries[q], k=PROJECT_K, mode=mode)),
                chunk_doc,
                doc_ids,
            )
            for q in qids
        }
    store.close()
    t_project = time.perf_counter() - t0

    metrics = {label: evaluate(r, qrels) for label, r in runs.items()}
    conn.close()
    n_q = len(qids)
    return {
        "split": args.split,
        "quick": bool(args.quick),
        "embedder": embedder.key,
        "chunking": params,
        "candidates_per_list": CANDIDATES,
        "defaults": {
            "FUSION": lexical.FUSION,
            "NORMALIZATION": lexical.NORMALIZATION,
            "ALPHA": lexical.ALPHA,
            "RRF_K": lexical.RRF_K,
            "RRF_WEIGHT": lexical.RRF_WEIGHT,
        },
        "documents": len(docs),
        "chunks": len(texts),
        "queries": n_q,
        "timings_s": {
            "chunking": round(t_chunk, 2),
            "embed_chunks": round(t_embed, 1),
            "passages_per_s_uncached": speed,
            "embedded_now": todo,
            "embed_queries": round(t_qembed, 2),
            "build_db": round(t_db, 1),
            "dense_ms_per_query": round(1000 * t_dense / n_q, 2),
            "bm25_ms_per_query": round(1000 * t_lex / n_q, 2),
            "rank_all": round(t_rank, 1),
            "fusion_variants": round(t_fuse, 1),
            "project_retriever_all_modes": round(t_project, 1),
            "total": round(time.perf_counter() - t_start, 1),
        },
        "metrics": metrics,
        "params": {label: kw for label, kw in configs + FILLED_VARIANTS},
    }


# Diagnostics: both lists carry the exact other score of every candidate (cosine of BM25 hits
# beyond the dense top 200, BM25 -- 0 when no term matches -- of dense hits), which
# retrieval.py could supply; it does not today.
FILLED_VARIANTS = [
    (f"filled convex {n} a={a}", {"method": "convex", "normalization": n, "alpha": a,
                                  "adaptive_power": 0.0})
    for n in ("minmax", "zscore", "tmm")
    for a in (0.45, 0.5, 0.55, 0.6)
] + [  # the weight adapted per query to the lists' margins (issue 13's default, no coverage)
    (f"filled convex tmm a={a} adaptive {p}", {"method": "convex", "normalization": "tmm",
                                               "alpha": a, "adaptive_power": p})
    for a in (0.55, 0.6) for p in (0.5,)
]
QUICK_VARIANTS = {"rrf k=10", "rrf k=60", "convex minmax a=0.45", "convex zscore a=0.50"}


# --- output ----------------------------------------------------------------------------------


def result_key(res: dict) -> str:
    whole = "|whole" if res["chunking"]["chunking"] == "whole" else ""
    return f"{res['split']}{'-quick' if res['quick'] else ''}|{res['embedder']}{whole}"


def column_label(res: dict) -> str:
    model = res["embedder"].split("@")[0]
    whole = ", whole docs" if res["chunking"]["chunking"] == "whole" else ""
    quick = " quick" if res["quick"] else ""
    return f"{res['split']}{quick} ({model}{whole})"


def markdown(results: dict) -> str:
    """One table: a row per method, nDCG@10 / R@100 columns per stored run (train first)."""
    keys = [k for k in results if not results[k]["quick"]] or list(results)
    keys.sort(
        key=lambda k: (
            results[k]["chunking"]["chunking"] == "whole",
            "L3" in results[k]["embedder"],
            results[k]["split"] != "train",
        )
    )
    labels: list[str] = []
    for k in keys:
        for label in results[k]["metrics"]:
            if label not in labels:
                labels.append(label)
    head = (
        "| method | "
        + " | ".join(f"{column_label(results[k])} nDCG@10 | R@100" for k in keys)
        + " |"
    )
    lines = [
        "SciFact (BEIR), document score = best chunk score, "
        f"{CANDIDATES} candidates per list. `project hybrid (Retriever.search)` is the app's own "
        f"query path (filled lists, convex tmm, BM25 x coverage, ALPHA {lexical.ALPHA} adapted per "
        f"query by the lists' margins ** {lexical.ADAPTIVE_POWER}); the other rows are variants computed "
        "in this script. Tuned on train; test held out.",
        "",
        head,
        "|" + "---|" * (1 + 2 * len(keys)),
    ]
    for label in labels:
        cells = []
        for k in keys:
            m = results[k]["metrics"].get(label)
            cells += [f"{m['ndcg@10']:.4f}", f"{m['recall@100']:.4f}"] if m else ["", ""]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=["train", "test"], default="test")
    ap.add_argument("--quick", action="store_true", help="small query + corpus subset, < 60 s")
    ap.add_argument("--embedder", default="local", choices=["local", "paraphrase-l3"])
    ap.add_argument(
        "--whole",
        action="store_true",
        help="whole abstracts, no chunking (the field notes' reference setting)",
    )
    ap.add_argument("--cache-dir", help=f"embedding cache folder (default {CACHE_DIR})")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    res = run(args)
    out = RESULTS / "scifact.json"
    results = json.loads(out.read_text()) if out.exists() else {}
    if not args.no_save:
        results[result_key(res)] = {**res, **C.provenance()}
        RESULTS.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        (RESULTS / "scifact.md").write_text(markdown(results) + "\n")
    single = {result_key(res): res}
    print(markdown(single))
    m = res["metrics"]
    best = max((lb for lb in m if lb not in ("dense", "bm25")), key=lambda lb: m[lb]["ndcg@10"])
    print(
        f"\nbest fusion on {args.split}: {best} {m[best]['ndcg@10']:.4f}; "
        f"project hybrid {m['project hybrid (Retriever.search)']['ndcg@10']:.4f}; "
        f"timings {res['timings_s']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
