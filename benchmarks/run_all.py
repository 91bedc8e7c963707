"""Run every benchmark, each in its own subprocess, and write the results and summary tables.

    python benchmarks/run_all.py            # full run (recorded figures; ~8 min, more on busy cores)
    python benchmarks/run_all.py --quick    # smoke test for CI: tiny sizes, < 2 min cold
    python benchmarks/run_all.py --tables   # only re-render results/summary.md from the JSON files
    python benchmarks/run_all.py --only ranking,latency

Runs bench_ranking.py, bench_ingest.py, bench_latency.py and squad_chunking.py (with ``--quick``
when given), then the colleagues' evaluations if present — ``scifact_eval.py --quick`` and
``squad_answers.py --quick`` (always their quick mode here, with their no-write flag unless
``--save-evals``: their full runs and results files are theirs to record). Each of ours writes its own ``benchmarks/results/*.json`` (keyed by run kind, so a quick run
never overwrites the full figures). This script records what ran, how long it took and its exit
status in ``results/run_all.json`` and renders ``results/summary.md`` (the README's tables).
Every other script in benchmarks/ (the studies: tuning grids, the held-out evaluations, load
tests) is imported, never run, so one that no longer matches the core fails here.
It exits non-zero if any benchmark crashed or timed out; it asserts no timing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import _common as C

OURS = ["ranking", "ingest", "latency", "squad_chunking"]
SCRIPTS = {
    "ranking": "bench_ranking.py",
    "ingest": "bench_ingest.py",
    "latency": "bench_latency.py",
    "squad_chunking": "squad_chunking.py",
    "scifact": "scifact_eval.py",
    "squad_answers": "squad_answers.py",
}
EVALS = ["scifact", "squad_answers"]  # owned by colleagues; run only if present, always --quick
# their results files are theirs: by default run_all only checks that they run (no write)
NO_WRITE = {"scifact": "--no-save", "squad_answers": "--no-write"}


def import_the_rest() -> dict[str, Any]:
    """Import (never run) every other benchmark script, so a study nothing runs cannot rot
    unnoticed: a renamed core function breaks its import here, not months later."""
    others = sorted(p.stem for p in C.BENCH.glob("*.py")
                    if p.name not in {*SCRIPTS.values(), "run_all.py"} and not p.stem.startswith("_"))
    code = ("import importlib, sys; sys.path.insert(0, 'benchmarks'); sys.path.insert(0, '.')\n"
            f"for name in {others!r}: importlib.import_module(name)")
    C.log(f"[run_all] importing {len(others)} other scripts")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=C.REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    status = "ok" if proc.returncode == 0 else "failed"
    C.log(f"[run_all] imports: {status}" + ("" if status == "ok" else "\n" + proc.stdout[-2000:]))
    return {"name": "imports", "command": f"import {', '.join(others)}", "status": status,
            "returncode": proc.returncode, "seconds": round(time.perf_counter() - t0, 1),
            "stdout_tail": proc.stdout.strip().splitlines()[-3:]}


def run_one(name: str, quick: bool, timeout: float, save_evals: bool = False) -> dict[str, Any]:
    script = C.BENCH / SCRIPTS[name]
    cmd = [sys.executable, str(script.relative_to(C.REPO))]
    if quick or name in EVALS:
        cmd.append("--quick")
    if name in NO_WRITE and not save_evals:
        cmd.append(NO_WRITE[name])
    C.log(f"[run_all] {' '.join(cmd[1:])}")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=C.REPO, timeout=timeout, stdout=subprocess.PIPE,
                              stderr=sys.stderr, text=True)
        rc, status = proc.returncode, "ok" if proc.returncode == 0 else "failed"
        tail = proc.stdout.strip().splitlines()[-3:]
    except subprocess.TimeoutExpired:
        rc, status, tail = -1, "timeout", []
    seconds = time.perf_counter() - t0
    C.log(f"[run_all] {name}: {status} in {seconds:.1f} s")
    return {"name": name, "command": "python " + " ".join(cmd[1:]), "status": status, "returncode": rc,
            "seconds": round(seconds, 1), "stdout_tail": tail}


# --------------------------------------------------------------------------- tables


def _load(name: str) -> dict[str, Any]:
    path = C.RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _f(x: Any, nd: int = 2) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def _pick(data: dict[str, Any], prefer: str) -> tuple[str, dict[str, Any]] | None:
    for run in (prefer, "full", "quick", "custom"):
        if run in data:
            return run, data[run]
    return None


def tables(prefer: str = "full") -> str:
    out: list[str] = []
    rk = _pick(_load("ranking"), prefer)
    if rk:
        run, r = rk
        out.append(f"### Ranking (`{r['command']}`, run: {run}, {r['recorded']})\n")
        out.append("| chunks | project p50 / p95 ms | floor p50 / p95 ms | project ÷ floor (p50, paired median) | floor, BLAS 1 thread p50 ms | generation check p50 ms | Retriever dense / hybrid p50 ms | hybrid: BM25 ms/query (calls) | naive numpy p50 ms | naive pure Python p50 ms |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n, e in r["sizes"].items():
            q = e["queries"]
            nv = e["naive"]

            def naive(key: str, nv: dict = nv) -> str:
                if key not in nv:
                    return "—"
                v = nv[key]
                return _f(v["p50_ms"], 1) + ("" if v.get("measured") else " (extrapolated)")

            one = q.get("floor_blas_1_thread") or {}
            b = q.get("hybrid_breakdown")
            hb = (f"{_f(b['bm25_ms_per_query'])} ({sum(v['calls_per_query'] for v in b['bm25_calls'].values()):.0f})"
                  if b else "—")
            out.append(
                f"| {int(n):,} | {_f(q['project']['p50_ms'])} / {_f(q['project']['p95_ms'])} | "
                f"{_f(q['floor']['p50_ms'])} / {_f(q['floor']['p95_ms'])} | {q['ratio_p50']:.2f}, {q['paired_ratio_median']:.2f} | "
                f"{_f(one.get('p50_ms'))} | {_f(q['generation_check']['p50_ms'], 3)} | "
                f"{_f(q.get('retriever_dense', {}).get('p50_ms'))} / {_f(q.get('retriever_hybrid', {}).get('p50_ms'))} | "
                f"{hb} | {naive('naive')} | {naive('naive_pure_python')} |"
            )
        out.append("")
        out.append("| chunks | build (via) | Store.load_vectors s | RSS before → after (MB) | peak RSS added (MB) | old loader (before 01796c5) s | its RSS added / peak added (MB) | matrix MB |")
        out.append("|---:|---|---:|---:|---:|---:|---:|---:|")
        for n, e in r["sizes"].items():
            ld, b = e["load"], e["build"]
            p, a = ld["project"], ld.get("before_01796c5") or ld.get("preallocated") or {}
            out.append(
                f"| {int(n):,} | {_f(b['seconds'], 1)} s ({b['via']}) | {_f(p['seconds_median'], 3)} | "
                f"{_f(p['rss_before_mb'], 0)} → {_f(p['rss_after_mb'], 0)} | {_f(p['rss_peak_added_mb'], 0)} | "
                f"{_f(a.get('seconds_median'), 3)} | {_f(a.get('rss_added_mb'), 0)} / {_f(a.get('rss_peak_added_mb'), 0)} | {_f(ld['matrix_mb'], 0)} |"
            )
        refresh = {n: e["queries"]["refresh"] for n, e in r["sizes"].items() if "refresh" in e["queries"]}
        if refresh:
            out.append("")
            out.append("| chunks | cycles | add one 10-chunk document ms | first query after it ms (incremental): median (each cycle) | next query ms | first query after deleting it ms (full reload): median (each cycle) | next query ms |")
            out.append("|---:|---:|---:|---:|---:|---:|---:|")

            def each(x: dict, key: str) -> str:
                return f"{_f(x[key], 1)} ({', '.join(_f(v, 1) for v in x.get(key.replace('_ms', '_all_ms'), []))})"

            for n, x in refresh.items():
                out.append(f"| {int(n):,} | {x.get('cycles', 1)} | {_f(x['add_document_ms'], 1)} | {each(x, 'first_query_after_add_ms')} | "
                           f"{_f(x['next_query_after_add_ms'])} | {each(x, 'first_query_after_delete_ms')} | "
                           f"{_f(x['next_query_after_delete_ms'])} |")
        probe = r.get("openblas_coretype_probe")
        if probe:
            out.append("")
            out.append(f"OpenBLAS core type probe (floor at {probe['n']:,} chunks, in-memory, subprocesses): "
                       f"as set ({probe['as_set']['corename']}) p50 {probe['as_set']['p50_ms']} ms; "
                       f"unset ({probe['unset']['corename']}) p50 {probe['unset']['p50_ms']} ms; "
                       f"unset ÷ as set = {probe['unset_over_as_set_p50']}.")
        out.append("")
    ig = _pick(_load("ingest"), prefer)
    if ig:
        run, r = ig
        out.append(f"### Ingestion (`{r['command']}`, run: {run}, {r['recorded']})\n")
        out.append("| what | project | same-run baseline | note |")
        out.append("|---|---:|---:|---|")
        if "pdf" in r:
            p = r["pdf"]
            out.append(f"| PDF extraction, {p['file']} ({p['pages']} pages) | {_f(p['project']['pages_per_s'], 1)} pages/s | "
                       f"bare pypdf extract_text: {_f(p['pypdf_raw']['pages_per_s'], 1)} pages/s | project ÷ raw time {p['project_over_raw']} |")
        if "chunking" in r:
            c = r["chunking"]
            for cfg, v in c["configs"].items():
                out.append(f"| chunk_text {cfg}, {c['mb_utf8']} MB SQuAD text | {_f(v['mb_per_s'], 1)} MB/s ({v['chunks']:,} chunks) | "
                           f"fixed slicing: {_f(v['fixed_slicing_mb_per_s'], 0)} MB/s | |")
        if "local_embedder" in r:
            e = r["local_embedder"]
            out.append(f"| LocalEmbedder.embed_documents, {e['passages']} passages of ~{e['mean_chars']:.0f} chars ({e['mean_tokens']:.0f} tokens) | "
                       f"{_f(e['passages_per_s'])} passages/s | field notes: {e['field_notes_reference_passages_per_s']} | model load {e['model_load_s']} s |")
        if "end_to_end" in r:
            e = r["end_to_end"]
            st = ", ".join(f"{k} {v} s" for k, v in e["seconds_by_stage"].items())
            out.append(f"| ingest_path {e['file']} ({e['pages']} pages → {e['chunks']} chunks), offline | {_f(e['seconds_total'])} s | target < 30 s: {'met' if e['met'] else 'NOT met'} | {st} |")
        out.append("")
        if "gemini" in r:
            g = r["gemini"]
            out.append(f"Gemini embedder via the fake server (latency {g['latency_s_per_request']} s per embed request):\n")
            out.append("| N chunks | concurrency | embed requests (expected ceil(N/100)) | batch sizes | max in flight | seconds | speedup vs c=1 (ideal) |")
            out.append("|---:|---:|---:|---|---:|---:|---:|")
            for x in g["runs"]:
                out.append(f"| {x['n_chunks']:,} | {x['concurrency']} | {x['embed_requests']} ({x['expected_requests']}) | "
                           f"{', '.join(map(str, x['batch_sizes']))} | {x['max_in_flight']} | {_f(x['seconds'], 2)} | "
                           f"{_f(x['speedup_vs_c1'])} ({_f(x['ideal_speedup'])}) |")
            if "ingest_bytes" in g:
                x = g["ingest_bytes"]
                out.append(f"\nThrough `ingest_bytes` (concurrency {x['concurrency']}): {x['chunks']} chunks → "
                           f"{x['embed_requests']} embed requests (expected {x['expected_requests']}), max in flight "
                           f"{x['max_in_flight']}, {x['seconds_total']} s.")
            out.append("")
    lt = _pick(_load("latency"), prefer)
    if lt:
        run, r = lt
        out.append(f"### Answer latency (`{r['command']}`, run: {run}, {r['recorded']}; article {r['article']})\n")
        out.append("| mode | questions (with sources) | → meta p50 / p95 ms | → first token p50 / p95 ms | meta → first token p50 ms | → done p50 ms | chunks indexed |")
        out.append("|---|---:|---:|---:|---:|---:|---:|")
        for mode, m in r["modes"].items():
            out.append(f"| {mode} ({m['embedder']} + {m['answerer']}) | {m['questions']} ({m['questions_with_sources']}) | "
                       f"{_f(m['to_meta']['p50_ms'], 1)} / {_f(m['to_meta']['p95_ms'], 1)} | "
                       f"{_f(m['to_first_token']['p50_ms'], 1)} / {_f(m['to_first_token']['p95_ms'], 1)} | "
                       f"{_f(m['meta_to_first_token']['p50_ms'], 1)} | {_f(m['to_done']['p50_ms'], 1)} | {m['chunks_indexed']} |")
        out.append("")
    sq = _pick(_load("squad_chunking"), prefer)
    if sq:
        run, r = sq
        out.append(f"### SQuAD chunking study (`{r['command']}`, run: {run}, {r['recorded']})\n")
        out.append(f"Articles: {', '.join(r['articles'])} ({r['questions']:,} questions).\n")
        out.append("| TARGET / OVERLAP | chunks | mean chars | > 256 tokens | coverage | chance R@1 / R@5 | dense R@1 / R@5 | BM25 R@1 / R@5 | hybrid R@1 / R@5 |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in r["configs"]:
            out.append(
                f"| {c['target']} / {c['overlap']} | {c['chunks']:,} | {c['mean_chunk_chars']:.0f} | {c['share_over_256_tokens']:.0%} | "
                f"{c['coverage']:.3f} | {c['chance_at_1']:.3f} / {c['chance_at_5']:.3f} | "
                f"{c['dense']['recall_at_1']:.3f} / {c['dense']['recall_at_5']:.3f} | "
                f"{c['lexical']['recall_at_1']:.3f} / {c['lexical']['recall_at_5']:.3f} | "
                f"{c['hybrid']['recall_at_1']:.3f} / {c['hybrid']['recall_at_5']:.3f} |"
            )
        out.append("")
    ra = _load("run_all")
    for run in ("full", "quick"):
        if run in ra:
            x = ra[run]
            steps = ", ".join(f"{s['name']} {s['seconds']} s ({s['status']})" for s in x["steps"])
            out.append(f"`{x['command']}`: {x['seconds_total']} s wall — {steps}.\n")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tables", action="store_true", help="only render results/summary.md")
    ap.add_argument("--only", help=f"comma-separated subset of: {', '.join(SCRIPTS)}")
    ap.add_argument("--skip-evals", action="store_true", help="skip scifact_eval / squad_answers")
    ap.add_argument("--save-evals", action="store_true",
                    help="let scifact_eval / squad_answers write their results files (default: no write)")
    args = ap.parse_args()
    run = "quick" if args.quick else "full"
    if args.tables:
        (C.RESULTS / "summary.md").write_text(tables(run) + "\n")
        print(tables(run))
        return 0
    names = args.only.split(",") if args.only else OURS + ([] if args.skip_evals else EVALS)
    names = [n for n in names if n in SCRIPTS and (C.BENCH / SCRIPTS[n]).exists()]
    timeout = 900 if args.quick else 5400
    t0 = time.perf_counter()
    steps = [run_one(n, args.quick, timeout, args.save_evals) for n in names]
    if not args.only:
        steps.append(import_the_rest())
    total = time.perf_counter() - t0
    failed = [s["name"] for s in steps if s["status"] != "ok"]
    if not args.only:
        C.write_result("run_all", run, {"steps": steps, "seconds_total": round(total, 1), "failed": failed})
    (C.RESULTS / "summary.md").write_text(tables(run) + "\n")
    C.log(f"[run_all] {run}: {total:.1f} s total; " + (f"FAILED: {', '.join(failed)}" if failed else "all ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
