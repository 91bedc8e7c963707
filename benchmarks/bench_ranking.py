"""Dense ranking speed at 10k / 100k / 1M chunks of 768 dims, against a floor and a naive scan.

    python benchmarks/bench_ranking.py                 # full: 10k, 100k, 1M (~4-6 min, ~10 GB peak)
    python benchmarks/bench_ranking.py --quick         # 10k only, few queries (CI smoke test)
    python benchmarks/bench_ranking.py --sizes 10000,100000 --queries 100

For each size a real SQLite file is built with the project's schema (``Store``): up to
``--add-document-max`` chunks (default 10k) go through ``Store.add_document`` (1,000 chunks per
document); bigger sizes insert synthetic rows with ``executemany`` (FTS5 triggers included), then
bump the generation like ``add_document`` does. Vectors are random normal, L2-normalized float32.
Each matrix is built once per process; the floor and the project share the very same array.
``VectorIndex`` is held on its exact path at every size here (``quantise_above``); the
quantised path the app takes past 100k chunks is compared with it in ``bench_backends.py``.

Measured, per size, in one process and interleaved query by query (the machine is shared and
noisy, so ratios within a run are the figures to read, not absolute times):

- ``project``: ``VectorIndex.search(q, k=6)`` over a real Store file (generation SELECT + GEMV
  + ``top_k``), the code path the app runs for dense retrieval;
- ``floor``: bare ``M @ q`` + ``np.argpartition`` + a sort of 6 over the same matrix (the
  memory-bandwidth floor: the GEMV streams the whole matrix once per query);
- ``generation``: ``Store.generation()`` alone (the per-query freshness check);
- ``floor_blas_1_thread``: the floor again with OpenBLAS set to one thread (through its C API),
  because on a loaded 2-core machine a 2-thread GEMV waits for a descheduled worker;
- ``retriever_dense`` / ``retriever_hybrid``: ``Retriever.search`` with a stub embedder that
  returns the query vector at no cost, so only ranking + BM25 + fusion + the chunk fetch count;
  ``hybrid_breakdown`` times every ``lexical.bm25_search`` call a hybrid search makes (chunk
  text is synthetic: 8 words from a 4,000-word vocabulary, so BM25 costs are indicative);
- ``naive``: read every BLOB from SQLite per query and score row by row (``np.frombuffer`` +
  dot per row, ``heapq.nlargest``); ``naive_pure_python`` does the dot in pure Python. Run at
  small sizes with few queries; larger sizes are extrapolated linearly and labelled so;
- ``refresh``: the first query after adding one 10-chunk document (``VectorIndex`` appends
  only the new rows: no deletion since the last load) and the one after it, then the first
  query after deleting that document (a deletion means a full reload) and the one after it;
  3 add/delete cycles (2 at 1M, 1 in ``--quick``), median and every cycle kept;
- ``load``: ``Store.load_vectors`` at start, through ``VectorIndex.refresh`` (time, RSS
  before/after, peak RSS during), next to ``load_before_01796c5``, a verbatim copy of the
  loader the project had before commit 01796c5 (``fetchall`` + ``b"".join`` + ``astype``),
  measured the same way in alternating fresh subprocesses: a before/after in one run.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import os
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import _common as C
import numpy as np

from marginalia_core.config import Settings
from marginalia_core.ingest.chunking import Chunk
from marginalia_core.retrieval.retriever import Retriever
from marginalia_core.retrieval.vector_index import VectorIndex
from marginalia_core.store.rows import VECTOR_DTYPE, now_iso
from marginalia_core.store.sqlite import Store

DIM = 768
K = 6
MODEL = "synthetic-normal"
DOC_CHUNKS = 1000
BLOCK = 20_000
VOCAB = [f"w{i:04d}" for i in range(4000)]
WORDS_PER_CHUNK = 8
SEED = 20240605
EXACT_PATH = 10**12  # this benchmark measures the exact float32 path at every size; the
# quantised path (default past ranking.QUANTISE_ABOVE_ROWS) is measured by bench_backends.py


# --------------------------------------------------------------------------- building


def _vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _content(rng: random.Random, i: int) -> str:
    return f"chunk {i} " + " ".join(rng.choices(VOCAB, k=WORDS_PER_CHUNK))


def build_store(path: Path, n: int, add_document_max: int) -> dict[str, Any]:
    """A Store file with ``n`` chunks; returns how it was built and how long it took."""
    store = Store(path)
    rng = np.random.default_rng(SEED + n)
    words = random.Random(SEED + n)
    t0 = time.perf_counter()
    via = "add_document" if n <= add_document_max else "executemany"
    done = 0
    if via == "add_document":
        while done < n:
            m = min(DOC_CHUNKS, n - done)
            vecs = _vectors(rng, m)
            chunks = []
            for j in range(m):
                text = _content(words, done + j)
                chunks.append(Chunk(idx=j, start=0, end=len(text), text=text, page_start=1, page_end=1))
            store.add_document(
                name=f"doc-{done // DOC_CHUNKS}.txt", mime="text/plain", size=m * 100,
                content_hash=uuid.uuid4().hex, embed_model=MODEL, embed_dim=DIM, chunks=chunks,
                embeddings=vecs, chunk_target=1400, chunk_overlap=200,
            )
            done += m
    else:
        while done < n:
            m = min(BLOCK, n - done)
            vecs = _vectors(rng, m)
            docs, rows = [], []
            for d0 in range(0, m, DOC_CHUNKS):
                doc_id = uuid.uuid4().hex
                cnt = min(DOC_CHUNKS, m - d0)
                docs.append(
                    (doc_id, f"doc-{(done + d0) // DOC_CHUNKS}.txt", "text/plain", cnt * 100, cnt,
                     1, uuid.uuid4().hex, MODEL, DIM, 1400, 200, now_iso(), "", "[0]")
                )
                for j in range(cnt):
                    text = _content(words, done + d0 + j)
                    rows.append(
                        (doc_id, j, text, 0, len(text), 1, 1, vecs[d0 + j].astype(VECTOR_DTYPE).tobytes())
                    )
            with store.write() as conn:
                conn.executemany(
                    "INSERT INTO documents (id, name, mime, size, chunk_count, page_count, "
                    "content_hash, embed_model, embed_dim, chunk_target, chunk_overlap, created, "
                    "text, page_starts) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    docs,
                )
                conn.executemany(
                    'INSERT INTO chunks (document_id, idx, content, start, "end", page_start, '
                    "page_end, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                conn.execute("UPDATE state SET value = value + 1 WHERE key = 'generation'")
            done += m
            del rows, vecs
    seconds = time.perf_counter() - t0
    store.close()
    return {
        "via": via,
        "seconds": round(seconds, 2),
        "chunks_per_s": round(n / seconds, 1),
        "db_mb": round(path.stat().st_size / 2**20, 1),
    }


# --------------------------------------------------------------------------- loading


def load_before_01796c5(store: Store, model: str, dim: int) -> tuple[int, np.ndarray, np.ndarray]:
    """``Store.load_vectors`` as it was before commit 01796c5 (``git show 01796c5^:
    marginalia_core/store.py``), copied verbatim, so the old loader can be timed next to the
    current one on the same file: every row in a list, one joined copy, one ``astype`` copy."""
    conn = store.conn
    conn.execute("BEGIN")
    try:
        generation = int(conn.execute("SELECT value FROM state WHERE key = 'generation'").fetchone()[0])
        rows = conn.execute(
            "SELECT c.id, c.embedding FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE d.embed_model = ? AND d.embed_dim = ? ORDER BY c.id",
            (model, dim),
        ).fetchall()
    finally:
        conn.execute("COMMIT")
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    if not rows:
        return generation, ids, np.zeros((0, dim), dtype=np.float32)
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=VECTOR_DTYPE)
    return generation, ids, matrix.reshape(len(rows), dim).astype(np.float32)


def load_probe(path: str, which: str) -> None:
    """Subprocess body: a fresh process opens the Store and loads every vector once, as the app
    does at start; prints time and RSS (MB) before/after/peak as JSON."""
    import numpy  # noqa: F401  (imported before the 'before' reading, as in the app)

    store = Store(path)
    store.generation()
    gc.collect()
    before = C.rss_mb()
    C.reset_peak_rss()
    t0 = time.perf_counter()
    if which == "project":
        index = VectorIndex(store, MODEL, DIM, quantise_above=EXACT_PATH)
        index.refresh()  # Store.load_vectors under VectorIndex's lock
        shape = index._current()[1].shape
    else:
        _, ids, matrix = load_before_01796c5(store, MODEL, DIM)
        shape = matrix.shape
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "rss_before_mb": before, "rss_after_mb": C.rss_mb(),
                      "rss_peak_mb": C.peak_rss_mb(), "shape": list(shape)}))


def measure_load(path: Path, n: int, reps: int) -> dict[str, Any]:
    """Project loader (VectorIndex.refresh -> Store.load_vectors) vs the pre-01796c5 loader, each
    in a fresh subprocess (so RSS before/after is that of an app starting), alternating."""
    out: dict[str, Any] = {"reps": reps, "page_cache": "warm (the file was just written)"}
    runs: dict[str, list[dict[str, Any]]] = {"project": [], "before_01796c5": []}
    for rep in range(reps):
        for which in ("before_01796c5", "project") if rep % 2 else ("project", "before_01796c5"):
            res = subprocess.run(
                [sys.executable, __file__, "--load-probe", str(path), which],
                capture_output=True, text=True, check=True,
            )
            r = json.loads(res.stdout.strip().splitlines()[-1])
            assert r["shape"] == [n, DIM], r
            runs[which].append(r)
    for which, rs in runs.items():
        rs = sorted(rs, key=lambda r: r["seconds"])
        med = rs[len(rs) // 2]
        out[which] = {
            "seconds_median": round(med["seconds"], 3),
            "seconds_all": [round(r["seconds"], 3) for r in runs[which]],
            "vectors_per_s": round(n / med["seconds"], 0),
            "rss_before_mb": med["rss_before_mb"],
            "rss_after_mb": med["rss_after_mb"],
            "rss_peak_mb": med["rss_peak_mb"],
            "rss_added_mb": round(med["rss_after_mb"] - med["rss_before_mb"], 1),
            "rss_peak_added_mb": round(med["rss_peak_mb"] - med["rss_before_mb"], 1),
        }
    out["matrix_mb"] = round(n * DIM * 4 / 2**20, 1)
    out["project_speedup_over_before"] = C.ratio(out["before_01796c5"]["seconds_median"], out["project"]["seconds_median"])
    return out


def open_index(path: Path) -> tuple[dict[str, Any], Store, VectorIndex]:
    """The index used for the query benchmark, loaded once in this process."""
    store = Store(path)
    store.generation()
    t0 = time.perf_counter()
    index = VectorIndex(store, MODEL, DIM, quantise_above=EXACT_PATH)
    index.refresh()
    return {"in_process_load_s": round(time.perf_counter() - t0, 3),
            "index_nbytes_mb": round(index.nbytes / 2**20, 1)}, store, index


# --------------------------------------------------------------------------- queries


def floor_search(matrix: np.ndarray, q: np.ndarray, k: int = K) -> np.ndarray:
    s = matrix @ q
    n = len(s)
    if k >= n:
        return np.argsort(-s)
    part = np.argpartition(s, n - k)[n - k :]
    return part[np.argsort(-s[part])]


def make_queries(matrix: np.ndarray, count: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """Stored vectors plus noise (cosine ~0.7 to their source), so top-k is meaningful."""
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, len(matrix), size=count).tolist()
    noise = rng.standard_normal((count, DIM), dtype=np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    q = matrix[targets] + noise
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q.astype(np.float32), targets


class StubEmbedder:
    """Returns a preset query vector instantly, so Retriever timings are ranking-only."""

    name = "stub"
    model = MODEL
    dimension = DIM
    batch_size = 32
    default_threshold = 0.35
    key = f"{MODEL}@{DIM}"

    def __init__(self) -> None:
        self.vector = np.zeros(DIM, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self.vector

    def embed_documents(self, texts, progress=None):  # pragma: no cover - unused
        raise NotImplementedError


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure_queries(store: Store, index: VectorIndex, queries: np.ndarray, targets: list[int],
                    retriever_queries: int, refresh_cycles: int = 3) -> dict[str, Any]:
    """Every variant on every query, in an order rotated per query, so noise hits all alike."""
    ids, matrix = index._current()
    threads = C.blas_threads()
    emb = StubEmbedder()
    retr = Retriever(store, emb, Settings(db_path=store.path).with_overrides(top_k=K))
    retr._index = index  # share the matrix (no second 3 GB load at 1M)
    words = random.Random(SEED + len(ids))
    texts = []
    for t in targets:
        row = store.conn.execute("SELECT content FROM chunks WHERE id = ?", (int(ids[t]),)).fetchone()
        texts.append(" ".join(words.sample(row[0].split()[2:], 3)))

    def one_thread_floor(q):
        C.blas_threads(1)
        try:
            floor_search(matrix, q)
        finally:
            C.blas_threads(threads)

    variants = {
        "project": lambda i: index.search(queries[i], k=K),
        "floor": lambda i: floor_search(matrix, queries[i]),
        "generation_check": lambda i: store.generation(),
    }
    if threads and threads > 1:
        variants["floor_blas_1_thread"] = lambda i: one_thread_floor(queries[i])

    def retr_search(i, mode):
        emb.vector = queries[i]
        return retr.search(texts[i], k=K, mode=mode)

    extra = {
        "retriever_dense": lambda i: retr_search(i, "dense"),
        "retriever_hybrid": lambda i: retr_search(i, "hybrid"),
        "project_paired_with_retriever": lambda i: index.search(queries[i], k=K),
    }
    warm = 5
    for i in range(warm):  # page faults, BLAS threads, SQLite caches
        for f in (*variants.values(), *extra.values()):
            f(i)
    times: dict[str, list[float]] = {name: [] for name in (*variants, *extra)}
    agree = 0
    for j, i in enumerate(range(warm, len(queries))):
        names = list(variants) + (list(extra) if j < retriever_queries else [])
        rot = j % len(names)
        for name in names[rot:] + names[:rot]:
            f = variants.get(name) or extra[name]
            t0 = time.perf_counter()
            f(i)
            times[name].append(time.perf_counter() - t0)
        agree += int(np.array_equal(ids[floor_search(matrix, queries[i])], index.search(queries[i], k=K).chunk_ids))
    project, floor = times["project"], times["floor"]
    paired = sorted(p / f for p, f in zip(project, floor))
    out: dict[str, Any] = {
        "queries": len(project),
        "blas_threads": threads,
        **{name: C.summary_ms(ts) for name, ts in times.items() if ts},
        "ratio_p50": C.ratio(C.percentile(project, 50), C.percentile(floor, 50)),
        "ratio_p95": C.ratio(C.percentile(project, 95), C.percentile(floor, 95)),
        "paired_ratio_median": round(paired[len(paired) // 2], 3),
        "same_top6_as_floor": f"{agree}/{len(project)}",
    }
    pr = times["project_paired_with_retriever"]
    if pr:
        for mode in ("dense", "hybrid"):
            out[f"retriever_{mode}_over_project_p50"] = C.ratio(
                C.percentile(times[f"retriever_{mode}"], 50), C.percentile(pr, 50))
    if refresh_cycles:
        out["refresh"] = measure_refresh(store, index, queries, refresh_cycles)
    if retriever_queries:
        out["hybrid_breakdown"] = hybrid_breakdown(retr, emb, queries, texts, warm, min(retriever_queries, 20))
    return out


def measure_refresh(store: Store, index: VectorIndex, queries: np.ndarray, cycles: int) -> dict[str, Any]:
    """``cycles`` times: add one 10-chunk document and time the next two searches (VectorIndex
    appends only the new rows when nothing was deleted), then delete it and time the next two
    (a deletion means a full reload). The index ends as it started.

    Both refreshes allocate a new matrix-sized array. On this VM the first fresh allocation of
    that size in a process can cost far more than later ones (first touch of guest memory, and
    transparent huge pages), so every cycle is kept and the median is reported next to them."""
    n0 = len(index._current()[0])
    vecs = _vectors(np.random.default_rng(SEED), 10)
    chunks = [Chunk(idx=j, start=0, end=5, text="added", page_start=1, page_end=1) for j in range(10)]
    keys = ("add_document_ms", "first_query_after_add_ms", "next_query_after_add_ms",
            "first_query_after_delete_ms", "next_query_after_delete_ms")
    per: dict[str, list[float]] = {k: [] for k in keys}
    for c in range(cycles):
        t0 = time.perf_counter()
        doc = store.add_document(
            name=f"added-{c}.txt", mime="text/plain", size=50, content_hash=uuid.uuid4().hex,
            embed_model=MODEL, embed_dim=DIM, chunks=chunks, embeddings=vecs,
            chunk_target=1400, chunk_overlap=200,
        )
        per["add_document_ms"].append((time.perf_counter() - t0) * 1000)
        per["first_query_after_add_ms"].append(_time(lambda: index.search(queries[0], k=K)) * 1000)
        per["next_query_after_add_ms"].append(_time(lambda: index.search(queries[1], k=K)) * 1000)
        assert len(index._current()[0]) == n0 + 10
        store.delete_document(doc.id)
        per["first_query_after_delete_ms"].append(_time(lambda: index.search(queries[0], k=K)) * 1000)
        per["next_query_after_delete_ms"].append(_time(lambda: index.search(queries[1], k=K)) * 1000)
        assert len(index._current()[0]) == n0
        gc.collect()
    out: dict[str, Any] = {"added_chunks": 10, "cycles": cycles}
    for k, v in per.items():
        out[k] = round(float(np.median(v)), 2)
        out[k.replace("_ms", "_all_ms")] = [round(x, 2) for x in v]
    return out


def hybrid_breakdown(retr: Retriever, emb: StubEmbedder, queries: np.ndarray, texts: list[str],
                     start: int, count: int) -> dict[str, Any]:
    """Where hybrid time goes: every ``lexical.bm25_search`` call made during ``count`` hybrid
    searches is timed (grouped by kind), next to the dense ranking of the same queries."""
    from marginalia_core.retrieval import lexical

    orig = lexical.bm25_search
    calls: list[tuple[str, float]] = []

    def timed(*a, **kw):
        kind = "restricted_to_ids" if kw.get("chunk_ids") is not None else (
            "all_terms" if kw.get("require_all") else "candidates")
        t0 = time.perf_counter()
        try:
            return orig(*a, **kw)
        finally:
            calls.append((kind, time.perf_counter() - t0))

    total, dense = 0.0, 0.0
    lexical.bm25_search = timed
    try:
        for i in range(start, start + count):
            emb.vector = queries[i]
            t0 = time.perf_counter()
            retr.search(texts[i], k=K, mode="hybrid")
            total += time.perf_counter() - t0
            dense += _time(lambda i=i: retr.index.score_all(queries[i]))
    finally:
        lexical.bm25_search = orig
    kinds: dict[str, dict[str, float]] = {}
    for kind, t in calls:
        d = kinds.setdefault(kind, {"calls_per_query": 0.0, "ms_per_query": 0.0})
        d["calls_per_query"] += 1 / count
        d["ms_per_query"] += t * 1000 / count
    bm25 = sum(d["ms_per_query"] for d in kinds.values())
    return {
        "queries": count,
        "hybrid_ms_per_query": round(total * 1000 / count, 2),
        "score_all_ms_per_query": round(dense * 1000 / count, 2),
        "bm25_ms_per_query": round(bm25, 2),
        "bm25_share_of_hybrid": round(bm25 / (total * 1000 / count), 3) if total else None,
        "bm25_calls": {k: {kk: round(vv, 2) for kk, vv in v.items()} for k, v in kinds.items()},
        "note": "synthetic chunk text: 8 words from a 4,000-word vocabulary; query = 3 of them",
    }


def naive_numpy(conn: sqlite3.Connection, q: np.ndarray, k: int = K) -> list[tuple[float, int]]:
    def scored():
        for cid, blob in conn.execute("SELECT id, embedding FROM chunks"):
            yield float(np.dot(np.frombuffer(blob, dtype="<f4"), q)), cid
    return heapq.nlargest(k, scored())


def naive_pure_python(conn: sqlite3.Connection, q: np.ndarray, k: int = K) -> list[tuple[float, int]]:
    qs = q.tolist()
    unpack = struct.Struct(f"<{DIM}f").unpack

    def scored():
        for cid, blob in conn.execute("SELECT id, embedding FROM chunks"):
            yield sum(a * b for a, b in zip(unpack(blob), qs)), cid
    return heapq.nlargest(k, scored())


def measure_naive(path: Path, queries: np.ndarray, n_numpy: int, n_pure: int) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    out: dict[str, Any] = {}
    naive_numpy(conn, queries[0])  # warm
    for name, fn, count in (("naive", naive_numpy, n_numpy), ("naive_pure_python", naive_pure_python, n_pure)):
        if count <= 0:
            continue
        ts = [_time(lambda q=q, fn=fn: fn(conn, q)) for q in queries[:count]]
        out[name] = C.summary_ms(ts)
    conn.close()
    return out


# --------------------------------------------------------------------------- OpenBLAS core type


CORETYPE_PROBE = r"""
import json, sys, time, numpy as np
import _common as C
n, dim, reps = int(sys.argv[1]), 768, int(sys.argv[2])
rng = np.random.default_rng(1)
m = rng.standard_normal((n, dim), dtype=np.float32); m /= np.linalg.norm(m, axis=1, keepdims=True)
qs = rng.standard_normal((reps + 5, dim), dtype=np.float32)
ts = []
for i, q in enumerate(qs):
    t0 = time.perf_counter(); s = m @ q; p = np.argpartition(s, n - 6)[n - 6:]; p[np.argsort(-s[p])]
    if i >= 5: ts.append(time.perf_counter() - t0)
print(json.dumps({"corename": C._openblas().get("corename"), **C.summary_ms(ts)}))
"""


def coretype_compare(n: int, reps: int, rounds: int = 2) -> dict[str, Any]:
    """The floor GEMV under the environment's OPENBLAS_CORETYPE vs with it (and L2_SIZE) unset,
    in alternating subprocesses. Informational only: the project's numbers use the environment."""
    env_unset = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    runs: dict[str, list[dict[str, Any]]] = {"as_set": [], "unset": []}
    for _ in range(rounds):
        for label, env in (("as_set", dict(os.environ)), ("unset", env_unset)):
            res = subprocess.run(
                [sys.executable, "-c", CORETYPE_PROBE, str(n), str(reps)], cwd=C.BENCH,
                env=env, capture_output=True, text=True, check=True,
            )
            runs[label].append(json.loads(res.stdout.strip().splitlines()[-1]))
    out: dict[str, Any] = {"n": n, "queries_per_round": reps}
    for label, rs in runs.items():
        out[label] = {
            "corename": rs[0]["corename"],
            "p50_ms": round(sorted(r["p50_ms"] for r in rs)[len(rs) // 2], 3),
            "rounds_p50_ms": [r["p50_ms"] for r in rs],
        }
    out["unset_over_as_set_p50"] = C.ratio(out["unset"]["p50_ms"], out["as_set"]["p50_ms"])
    return out


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", help="comma-separated chunk counts")
    ap.add_argument("--queries", type=int, help="queries per size (default by size)")
    ap.add_argument("--add-document-max", type=int, default=10_000)
    ap.add_argument("--no-coretype", action="store_true", help="skip the OPENBLAS_CORETYPE probe")
    ap.add_argument("--tmp", help="directory for the Store files (default: a temp dir)")
    ap.add_argument("--load-probe", nargs=2, metavar=("DB", "LOADER"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load_probe:
        load_probe(*args.load_probe)
        return 0
    run = "quick" if args.quick else ("full" if not args.sizes and not args.queries else "custom")
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([10_000] if args.quick else [10_000, 100_000, 1_000_000])
    default_q = {10_000: 300, 100_000: 200, 1_000_000: 40}
    tmp = Path(tempfile.mkdtemp(prefix="bench-ranking-", dir=args.tmp))
    results: dict[str, Any] = {"k": K, "dim": DIM, "sizes": {}}
    naive_per_row: dict[str, float] = {}
    t_start = time.perf_counter()
    try:
        for n in sizes:
            C.log(f"[ranking] n={n:,}: building Store file")
            path = tmp / f"rank-{n}.db"
            entry: dict[str, Any] = {"build": build_store(path, n, args.add_document_max)}
            C.log(f"[ranking] n={n:,}: built {entry['build']}")
            reps = 1 if args.quick else (3 if n <= 100_000 else 1)
            entry["load"] = load = measure_load(path, n, reps)
            C.log(f"[ranking] n={n:,}: load {load['project']['seconds_median']} s "
                  f"(before 01796c5: {load['before_01796c5']['seconds_median']} s), RSS +{load['project']['rss_added_mb']} MB "
                  f"(peak +{load['project']['rss_peak_added_mb']}) vs +{load['before_01796c5']['rss_added_mb']} MB "
                  f"(peak +{load['before_01796c5']['rss_peak_added_mb']})")
            entry["index"], store, index = open_index(path)
            nq = args.queries or (30 if args.quick else default_q.get(n, 100))
            queries, targets = make_queries(index._current()[1], nq + 5, SEED + n)
            entry["queries"] = measure_queries(store, index, queries, targets, retriever_queries=10 if args.quick else min(nq, 40),
                                              refresh_cycles=1 if args.quick else (3 if n <= 100_000 else 2))
            qd = entry["queries"]
            C.log(f"[ranking] n={n:,}: project p50 {qd['project']['p50_ms']} ms, floor p50 {qd['floor']['p50_ms']} ms, "
                  f"ratio {qd['ratio_p50']}, hybrid retriever p50 {qd['retriever_hybrid']['p50_ms']} ms")
            # naive scan: measured where affordable, extrapolated (linearly per row) otherwise
            n_numpy = (3 if args.quick else 10) if n <= 10_000 else (2 if args.quick else 3) if n <= 100_000 else 0
            n_pure = (1 if args.quick else 3) if n <= 10_000 else 0
            naive = measure_naive(path, queries, n_numpy, n_pure)
            for name in ("naive", "naive_pure_python"):
                if name in naive:
                    naive[name]["measured"] = True
                    naive_per_row[name] = naive[name]["p50_ms"] / n
                elif name in naive_per_row:
                    naive[name] = {
                        "p50_ms": round(naive_per_row[name] * n, 1),
                        "measured": False,
                        "extrapolated_from_ms_per_row": round(naive_per_row[name], 6),
                    }
            entry["naive"] = naive
            results["sizes"][str(n)] = entry
            store.close()
            del index, store, queries
            gc.collect()
            path.unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        if not args.quick and not args.no_coretype:
            C.log("[ranking] OPENBLAS_CORETYPE probe (100k in-memory floor, subprocesses)")
            results["openblas_coretype_probe"] = coretype_compare(100_000 if not args.sizes else min(sizes[-1], 100_000), 100)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["seconds_total"] = round(time.perf_counter() - t_start, 1)
    if "100000" in results["sizes"]:
        r = results["sizes"]["100000"]["queries"]["ratio_p50"]
        results["target_100k_within_1_5x_of_floor"] = {"ratio_p50": r, "met": bool(r <= 1.5)}
    path = C.write_result("ranking", run, results)
    print(json.dumps({"written": str(path.relative_to(C.REPO)), "run": run, "seconds": results["seconds_total"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
