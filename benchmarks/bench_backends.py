"""Dense ranking backends side by side at 100k and 1M chunks of 384 dims, in one run.

    python benchmarks/bench_backends.py                        # full: 100k and 1M (~15 min)
    python benchmarks/bench_backends.py --quick                # 20k rows, quantised forced
    python benchmarks/bench_backends.py --sizes 100000 --queries 200

Each size gets one real SQLite library (``Store`` schema, rows inserted with ``executemany``),
filled with synthetic vectors that look like real embeddings: clustered (one cluster per ~500
chunks), anisotropic (a decaying spectrum in a random basis) and sharing a common mean
direction, L2-normalised (``synthetic``). Queries are fresh draws from the same distribution.
Ground truth is exact numpy top-10 over the very float32 rows written to the database.

Backends (``BACKENDS``; each opens the library file and answers ``search(q, k)``):

- ``exact_numpy``: ``VectorIndex`` on its exact path (resident float32 matrix, one GEMV);
- ``quantised_sqlite``: ``VectorIndex`` on its quantised path (binary scan, int8 re-score,
  exact float32 re-score of the best few read from SQLite), codes loaded from the sidecar;
- ``pgvector_exact`` / ``pgvector_hnsw`` columns are left for the PostgreSQL store: add a
  ``Backend`` to ``BACKENDS`` (open/search/close) and it is measured the same way.

Per backend and size: ``load`` (fresh subprocess: seconds, RSS added, peak RSS added; the
quantised path also its first build from the database, when no sidecar exists), query latency
p50/p95 (all backends in this process, interleaved query by query, BLAS on one thread, since
the 2-core machine is shared), recall@10 against exact numpy, resident index bytes.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

import _common as C
import numpy as np

from marginalia_core.retrieval import ranking
from marginalia_core.retrieval.ranking import VectorIndex, sidecar_dir
from marginalia_core.store.sqlite import VECTOR_DTYPE, Store, now_iso

DIM = 384
K = 10
MODEL = "synthetic-clustered"
DOC_CHUNKS = 1000
BLOCK = 20_000
SEED = 20261203
EXACT_ALWAYS = 10**12  # quantise_above for the exact backend


# --------------------------------------------------------------------------- data


def synthetic(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    """Clustered, anisotropic, mean-sharing, normalised float32 rows (deterministic per seed;
    the basis, spectrum, mean and cluster centres are shared by every seed)."""
    basis = np.linalg.qr(np.random.default_rng(7).standard_normal((dim, dim)))[0].astype(np.float32)
    spectrum = (np.arange(1, dim + 1) ** -0.6).astype(np.float32)
    clusters = 2_000
    centers = (np.random.default_rng(11).standard_normal((clusters, dim)).astype(np.float32) * spectrum) @ basis.T
    centers += 2.5 / np.sqrt(dim) * np.random.default_rng(13).standard_normal(dim).astype(np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for a in range(0, n, 100_000):
        m = min(n, a + 100_000) - a
        x = centers[rng.integers(0, clusters, m)]
        x += 0.5 * (rng.standard_normal((m, dim), dtype=np.float32) * spectrum) @ basis.T
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[a : a + m] = x
    return out


def build_store(path: Path, vectors: np.ndarray) -> dict[str, Any]:
    store = Store(path)
    t0 = time.perf_counter()
    for a in range(0, len(vectors), BLOCK):
        part = vectors[a : a + BLOCK]
        docs, rows = [], []
        for d0 in range(0, len(part), DOC_CHUNKS):
            doc_id = uuid.uuid4().hex
            cnt = min(DOC_CHUNKS, len(part) - d0)
            docs.append((doc_id, f"doc-{(a + d0) // DOC_CHUNKS}.txt", "text/plain", cnt * 100, cnt, 1,
                         uuid.uuid4().hex, MODEL, DIM, 1400, 200, now_iso(), "", "[0]"))
            rows.extend((doc_id, j, f"chunk {a + d0 + j}", 0, 10, 1, 1,
                         part[d0 + j].astype(VECTOR_DTYPE).tobytes()) for j in range(cnt))
        with store.write() as conn:
            conn.executemany(
                "INSERT INTO documents (id, name, mime, size, chunk_count, page_count, content_hash, "
                "embed_model, embed_dim, chunk_target, chunk_overlap, created, text, page_starts) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", docs)
            conn.executemany(
                'INSERT INTO chunks (document_id, idx, content, start, "end", page_start, page_end, '
                "embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            conn.execute("UPDATE state SET value = value + 1 WHERE key = 'generation'")
    seconds = time.perf_counter() - t0
    store.close()
    return {"seconds": round(seconds, 1), "db_mb": round(path.stat().st_size / 2**20, 1)}


# --------------------------------------------------------------------------- backends


class Searcher(Protocol):
    def search(self, q: np.ndarray, k: int) -> np.ndarray: ...  # chunk ids, best first

    def nbytes(self) -> int: ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: str

    def open(self, db_path: str, quantise_above: int) -> Searcher: ...


class _IndexSearcher:
    def __init__(self, db_path: str, quantise_above: int, *, exact: bool):
        self.store = Store(db_path)
        self.index = VectorIndex(self.store, MODEL, DIM, quantise_above=EXACT_ALWAYS if exact else quantise_above)
        len(self.index)  # load now
        if not exact and not self.index.quantised:
            raise RuntimeError("the library is below the quantisation threshold")

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        return self.index.search(q, k=k).chunk_ids

    def nbytes(self) -> int:
        return self.index.nbytes

    def close(self) -> None:
        self.store.close()


class ExactNumpy:
    name = "exact_numpy"

    def open(self, db_path: str, quantise_above: int) -> Searcher:
        return _IndexSearcher(db_path, quantise_above, exact=True)


class QuantisedSqlite:
    name = "quantised_sqlite"

    def open(self, db_path: str, quantise_above: int) -> Searcher:
        return _IndexSearcher(db_path, quantise_above, exact=False)


BACKENDS: dict[str, Backend] = {b.name: b for b in (ExactNumpy(), QuantisedSqlite())}
NOT_RUN = {
    "pgvector_exact": "PostgreSQL store (H15b) registers its Backend here",
    "pgvector_hnsw": "PostgreSQL store (H15b) registers its Backend here, with an ef_search sweep",
}


# --------------------------------------------------------------------------- measuring


def load_probe(db: str, name: str, quantise_above: int) -> None:
    """Subprocess body: open one backend as an app starting would; print time and RSS."""
    gc.collect()
    before = C.rss_mb()
    C.reset_peak_rss()
    t0 = time.perf_counter()
    searcher = BACKENDS[name].open(db, quantise_above)
    seconds = time.perf_counter() - t0
    extra = getattr(getattr(searcher, "index", None), "last_load", {})
    print(json.dumps({"seconds": seconds, "rss_added_mb": round(C.rss_mb() - before, 1),
                      "rss_peak_added_mb": round(C.peak_rss_mb() - before, 1),
                      "index_mb": round(searcher.nbytes() / 2**20, 1), "how": extra.get("how")}))


def probe(db: Path, name: str, quantise_above: int) -> dict[str, Any]:
    res = subprocess.run([sys.executable, __file__, "--load-probe", str(db), name, str(quantise_above)],
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure_size(n: int, queries_n: int, tmp: Path, quantise_above: int, reps: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"n": n}
    C.log(f"[backends] n={n:,}: generating vectors")
    x = synthetic(n, SEED + n)
    queries = synthetic(queries_n + 5, SEED + n + 1)
    path = tmp / f"lib-{n}.db"
    entry["build"] = build_store(path, x)
    C.log(f"[backends] n={n:,}: library built {entry['build']}")
    ids = np.arange(1, n + 1, dtype=np.int64)  # AUTOINCREMENT on a fresh file
    truth = [ids[np.argpartition(-(x @ q), K)[:K]] for q in queries]
    del x
    gc.collect()

    load: dict[str, Any] = {}
    side = sidecar_dir(str(path), MODEL, DIM)
    shutil.rmtree(side.parent, ignore_errors=True)
    first = probe(path, "quantised_sqlite", quantise_above)  # no sidecar yet: built from SQLite
    load["quantised_sqlite_first_build"] = first
    C.log(f"[backends] n={n:,}: quantised first build {first}")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in BACKENDS}
    for rep in range(reps):
        order = list(BACKENDS) if rep % 2 == 0 else list(reversed(BACKENDS))
        for name in order:
            runs[name].append(probe(path, name, quantise_above))
    for name, rs in runs.items():
        rs = sorted(rs, key=lambda r: r["seconds"])
        med = rs[len(rs) // 2]
        load[name] = {**med, "seconds": round(med["seconds"], 3), "seconds_all": [round(r["seconds"], 3) for r in runs[name]]}
    entry["load"] = load
    C.log(f"[backends] n={n:,}: load {json.dumps(load)}")

    searchers = {name: b.open(str(path), quantise_above) for name, b in BACKENDS.items()}
    threads = C.blas_threads()
    C.blas_threads(1)
    try:
        for i in range(5):
            for s in searchers.values():
                s.search(queries[i], K)
        times: dict[str, list[float]] = {name: [] for name in searchers}
        hits: dict[str, int] = dict.fromkeys(searchers, 0)
        names = list(searchers)
        for j, i in enumerate(range(5, len(queries))):
            rot = j % len(names)
            for name in names[rot:] + names[:rot]:
                t0 = time.perf_counter()
                got = searchers[name].search(queries[i], K)
                times[name].append(time.perf_counter() - t0)
                hits[name] += len(set(got.tolist()) & set(truth[i].tolist()))
    finally:
        if threads:
            C.blas_threads(threads)
    exact_bytes = n * DIM * 4
    entry["backends"] = {}
    for name, s in searchers.items():
        entry["backends"][name] = {
            **C.summary_ms(times[name]),
            "recall_at_10": round(hits[name] / (K * queries_n), 4),
            "index_mb": round(s.nbytes() / 2**20, 1),
            "index_share_of_float32": round(s.nbytes() / exact_bytes, 3),
            "load_s": load[name]["seconds"],
            "load_rss_added_mb": load[name]["rss_added_mb"],
            "load_rss_peak_added_mb": load[name]["rss_peak_added_mb"],
        }
        s.close()
    entry["backends"].update({name: {"not_run": why} for name, why in NOT_RUN.items() if name not in BACKENDS})
    e, q = entry["backends"]["exact_numpy"], entry["backends"]["quantised_sqlite"]
    entry["quantised_vs_exact"] = {"p50_speedup": C.ratio(e["p50_ms"], q["p50_ms"]),
                                   "load_speedup": C.ratio(e["load_s"], q["load_s"]),
                                   "memory_share": q["index_share_of_float32"]}
    entry["queries"] = queries_n
    entry["blas_threads_for_queries"] = 1
    C.log(f"[backends] n={n:,}: {json.dumps(entry['backends'])}")
    for f in tmp.glob(f"lib-{n}.db*"):
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    return entry


def shape_stats(x: np.ndarray) -> dict[str, float]:
    """How clustered / mean-dominated a set of unit vectors is (to compare with real ones)."""
    mean = x.mean(axis=0)
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    off = sims[np.isfinite(sims)]
    return {"n": len(x), "cos_to_mean": round(float((x @ (mean / np.linalg.norm(mean))).mean()), 3),
            "nearest_neighbour_cos": round(float(sims.max(axis=1).mean()), 3),
            "median_pair_cos": round(float(np.median(off)), 3)}


def real_vs_synthetic() -> dict[str, Any]:
    """SciFact vectors of the local embedder cached by the other benchmarks, if any, beside the
    same statistics of the synthetic set (sample of the same size)."""
    from _cache import CACHE_DIR

    parts = []
    for shard in sorted((CACHE_DIR / "embeddings").glob(f"*@{DIM}/*.npz")):
        with np.load(shard) as z:
            parts.append(np.asarray(z["vecs"], dtype=np.float32))
    if not parts:
        return {"not_run": "no cached local-embedder vectors in benchmarks/.cache"}
    real = np.concatenate(parts)[:5000]
    real /= np.linalg.norm(real, axis=1, keepdims=True)
    return {"real_cached": shape_stats(real), "synthetic": shape_stats(synthetic(len(real), 1)),
            "note": "too few cached real vectors for a recall run at scale; the synthetic set has a "
                    "stronger common mean and tighter clusters than these (a harder case for sign codes)"}


def targets(entry: dict[str, Any]) -> dict[str, Any]:
    q = entry["backends"]["quantised_sqlite"]
    return {"p50_le_50ms": q["p50_ms"] <= 50, "recall_ge_0_99": q["recall_at_10"] >= 0.99,
            "memory_le_third": q["index_share_of_float32"] <= 1 / 3, "load_le_3s": q["load_s"] <= 3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", help="comma-separated chunk counts")
    ap.add_argument("--queries", type=int)
    ap.add_argument("--reps", type=int, help="load probes per backend (fresh processes)")
    ap.add_argument("--tmp", help="directory for the library files (default: a temp dir)")
    ap.add_argument("--load-probe", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load_probe:
        load_probe(args.load_probe[0], args.load_probe[1], int(args.load_probe[2]))
        return 0
    run = "quick" if args.quick else ("full" if not (args.sizes or args.queries) else "custom")
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([20_000] if args.quick else [100_000, 1_000_000])
    quantise_above = 10_000 if args.quick else ranking.QUANTISE_ABOVE_ROWS
    tmp = Path(tempfile.mkdtemp(prefix="bench-backends-", dir=args.tmp))
    results: dict[str, Any] = {"k": K, "dim": DIM, "data": "synthetic clustered/anisotropic/normalised",
                               "quantise_above": quantise_above, "sizes": {}}
    t0 = time.perf_counter()
    try:
        for n in sizes:
            nq = args.queries or (30 if args.quick else (200 if n <= 100_000 else 100))
            entry = measure_size(n, nq, tmp, quantise_above, args.reps or (1 if args.quick else 3))
            entry["targets_met"] = targets(entry)
            results["sizes"][str(n)] = entry
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["real_vectors"] = real_vs_synthetic()
    results["seconds_total"] = round(time.perf_counter() - t0, 1)
    path = C.write_result("backends", run, results)
    print(json.dumps({"written": str(path.relative_to(C.REPO)), "run": run, "seconds": results["seconds_total"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
