"""Shared helpers for the speed benchmarks (bench_*.py, squad_chunking.py, run_all.py).

Machine description, percentiles, resident-memory probes, SQuAD loading with exact answer
offsets, and the results file format: every ``benchmarks/results/<name>.json`` holds one entry
per run kind (``"full"``, ``"quick"``), each with the command that produced it, the machine, and
the figures, so a quick smoke run never overwrites the recorded full run.
"""

from __future__ import annotations

import ctypes
import glob
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
RESULTS = BENCH / "results"
CACHE = BENCH / ".cache"  # gitignored
SHARED_EVAL = (REPO / ".." / "shared" / "eval").resolve()
SQUAD_DIR = SHARED_EVAL / "squad-v1.1-dev"
PDF_DIR = SHARED_EVAL / "pdfs"
GEOTOPO = PDF_DIR / "sf__GeoTopo-komprimiert.pdf"



def test_helper(name: str) -> Any:
    """A module from tests/ (the fake model servers), loaded by file path: benchmarks drive the
    same fakes as the tests without putting tests/ on sys.path. A helper that imports another
    one (``fake_gemini`` imports ``fake_server``) gets it loaded the same way, then runs again."""
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / f"{name}.py")
    assert spec and spec.loader, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        del sys.modules[name]
        sibling = exc.name or ""
        if sibling in sys.modules or not (REPO / "tests" / f"{sibling}.py").is_file():
            raise
        test_helper(sibling)
        return test_helper(name)
    return module


# --------------------------------------------------------------------------- machine


def _openblas() -> dict[str, Any]:
    """Core type / threads / config straight from the loaded OpenBLAS (no threadpoolctl here)."""
    import numpy as np

    out: dict[str, Any] = {}
    libdirs = [Path(np.__file__).parent.parent / "numpy.libs", Path(np.__file__).parent / ".libs"]
    libs = [f for d in libdirs for f in glob.glob(str(d / "lib*openblas*"))]
    if not libs:
        return out
    try:
        lib = ctypes.CDLL(libs[0])
    except OSError:
        return out
    for prefix in ("scipy_openblas_", "openblas_"):
        for suffix in ("64_", ""):
            name = f"{prefix}get_corename{suffix}"
            if hasattr(lib, name):
                f = getattr(lib, name)
                f.restype = ctypes.c_char_p
                out["corename"] = f().decode()
                g = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
                if g is not None:
                    out["threads"] = int(g())
                h = getattr(lib, f"{prefix}get_config{suffix}", None)
                if h is not None:
                    h.restype = ctypes.c_char_p
                    out["config"] = h().decode()
                out["library"] = Path(libs[0]).name
                return out
    return out


def _openblas_fn(kind: str):
    import numpy as np

    libdirs = [Path(np.__file__).parent.parent / "numpy.libs", Path(np.__file__).parent / ".libs"]
    libs = [f for d in libdirs for f in glob.glob(str(d / "lib*openblas*"))]
    if not libs:
        return None
    try:
        lib = ctypes.CDLL(libs[0])
    except OSError:
        return None
    for name in (f"scipy_openblas_{kind}64_", f"openblas_{kind}64_", f"openblas_{kind}"):
        if hasattr(lib, name):
            return getattr(lib, name)
    return None


def blas_threads(n: int | None = None) -> int | None:
    """OpenBLAS's thread count; with ``n``, set it and return the previous count."""
    get, put = _openblas_fn("get_num_threads"), _openblas_fn("set_num_threads")
    if get is None:
        return None
    before = int(get())
    if n is not None and put is not None:
        put(int(n))
    return before


def machine() -> dict[str, Any]:
    import numpy as np

    cpu = "unknown"
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    blas: dict[str, Any] = {}
    try:
        cfg = np.show_config(mode="dicts")
        b = cfg.get("Build Dependencies", {}).get("blas", {})
        blas = {"name": b.get("name"), "version": b.get("version")}
    except Exception:
        pass
    try:
        import threadpoolctl  # type: ignore[import-not-found]

        blas["threadpoolctl"] = threadpoolctl.threadpool_info()
    except ImportError:
        pass
    blas.update(_openblas())
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    mem_total = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_total = int(line.split()[1]) // 1024
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "avx512f": "avx512f" in flags,
        "mem_total_mb": mem_total,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": blas,
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
        "loadavg_at_start": [round(x, 2) for x in load] if load else None,
    }


def command_line() -> str:
    rel = os.path.relpath(sys.argv[0], REPO) if sys.argv and sys.argv[0] else "?"
    return " ".join(["python", shlex.quote(rel), *map(shlex.quote, sys.argv[1:])])


# --------------------------------------------------------------------------- stats


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary_ms(seconds: Iterable[float]) -> dict[str, float]:
    xs = [s * 1000.0 for s in seconds]
    return {
        "n": len(xs),
        "p50_ms": round(percentile(xs, 50), 4),
        "p95_ms": round(percentile(xs, 95), 4),
        "mean_ms": round(statistics.fmean(xs), 4) if xs else float("nan"),
        "min_ms": round(min(xs), 4) if xs else float("nan"),
    }


def time_calls(fn: Callable[[], Any], n: int, warmup: int = 0) -> list[float]:
    """Seconds per call of ``fn`` over ``n`` timed calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


class Stopwatch:
    """``with Stopwatch() as sw: ...`` then ``sw.seconds``; for one-off phases (load, index)."""

    def __enter__(self) -> Stopwatch:
        self._t0 = time.perf_counter()
        self.seconds = float("nan")
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


# --------------------------------------------------------------------------- memory


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def rss_mb() -> float:
    return round(_status_kb("VmRSS") / 1024.0, 1)


def peak_rss_mb() -> float:
    return round(_status_kb("VmHWM") / 1024.0, 1)


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- results


def provenance() -> dict[str, Any]:
    """What every recorded result carries: the command that produced it, when, and the machine."""
    return {"command": command_line(), "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": machine()}


def write_result(name: str, run: str, payload: dict[str, Any]) -> Path:
    """Merge ``payload`` into results/<name>.json under ``run`` ("full" / "quick" / ...)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            data = {}
    data[run] = {**provenance(), **payload}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=_jsonable) + "\n")
    tmp.replace(path)
    return path


def _jsonable(obj: Any) -> Any:
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:
        pass
    return str(obj)


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- SQuAD


def load_squad() -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """(articles by id, questions by article id), read from ../shared/eval (never copied).

    Each question: ``{"id", "question", "answers": [text...], "spans": [(start, end)...]}``
    with spans as offsets into the article text. articles_derived.jsonl joins the paragraphs
    with a separator (checked here), so SQuAD's paragraph ``answer_start`` maps exactly; if an
    article's text is not such a join, spans are empty and callers fall back to string match.
    """
    articles: dict[str, dict[str, Any]] = {}
    with open(SQUAD_DIR / "articles_derived.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            articles[d["_id"]] = d
    with open(SQUAD_DIR / "dev-v1.1.json", encoding="utf-8") as f:
        dev = json.load(f)["data"]
    questions: dict[str, list[dict[str, Any]]] = {}
    for art in dev:
        aid = art["title"]
        text = articles.get(aid, {}).get("text")
        if text is None:
            continue
        contexts = [p["context"] for p in art["paragraphs"]]
        offsets: list[int] | None = None
        for sep in ("\n\n", "\n", " "):
            if text == sep.join(contexts):
                offsets, pos = [], 0
                for c in contexts:
                    offsets.append(pos)
                    pos += len(c) + len(sep)
                break
        qs = []
        for pi, para in enumerate(art["paragraphs"]):
            for qa in para["qas"]:
                spans = []
                if offsets is not None:
                    for a in qa["answers"]:
                        s = offsets[pi] + a["answer_start"]
                        e = s + len(a["text"])
                        if text[s:e] == a["text"]:
                            spans.append((s, e))
                qs.append(
                    {
                        "id": qa["id"],
                        "question": qa["question"],
                        "answers": sorted({a["text"] for a in qa["answers"]}),
                        "spans": sorted(set(spans)),
                    }
                )
        questions[aid] = qs
    return articles, questions


def token_counts(embedder, texts: Sequence[str]) -> list[int]:
    """Tokens per text with the embedder's tokenizer *without* its truncation and padding (the
    shared tokenizer pads a batch to its longest text and cuts at 256, which would hide both)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(embedder._tokenizer.to_str())
    tok.no_truncation()
    tok.no_padding()
    return [len(e.ids) for e in tok.encode_batch(list(texts))]
