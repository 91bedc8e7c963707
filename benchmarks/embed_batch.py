"""Local ONNX embedder (providers/embeddings/local.py): passages per second against batch size.

    PYTHONPATH=. python benchmarks/embed_batch.py                 # 128 passages, 5 rounds
    PYTHONPATH=. python benchmarks/embed_batch.py --quick         # 32 passages, 2 rounds (smoke)

The passages are what ingestion embeds: SQuAD dev articles cut by the app's own chunker
(chunking.chunk_text, default target and overlap), so their lengths are the real mix. This
machine is shared, so the batch sizes are interleaved: every round embeds the same passages
once per size, the order of the sizes rotating from round to round (a load swing hits every
size alike, and no size always runs first), and each size's figure is its median over rounds.
Peak RSS per size is measured in a child process per size after the timing rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import _common as C

from marginalia_core.ingest.chunking import chunk_text

BATCH_SIZES = (8, 16, 32, 64, 128)

RSS_CHILD = """
import json, resource, sys
from marginalia_core.providers.embeddings.local import LocalEmbedder
size, texts = int(sys.argv[1]), json.loads(sys.stdin.read())
emb = LocalEmbedder()
emb.embed_documents(texts[:2])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
emb.batch_size = size
emb.embed_documents(texts)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"model_loaded_mb": round(base / 1024, 1), "peak_mb": round(peak / 1024, 1)}))
"""


def passages(count: int) -> list[str]:
    """The first ``count`` chunks of SQuAD dev articles, as the app chunks them."""
    articles, _ = C.load_squad()
    out: list[str] = []
    for article in sorted(articles.values(), key=lambda a: a["_id"]):
        out.extend(c.text for c in chunk_text(article["text"]))
        if len(out) >= count:
            break
    return out[:count]


def rounds(emb: Any, texts: list[str], sizes: tuple[int, ...], n: int) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {str(s): [] for s in sizes}
    for r in range(n):
        order = sizes[r % len(sizes):] + sizes[:r % len(sizes)]
        for size in order:
            emb.batch_size = size
            t0 = time.perf_counter()
            emb.embed_documents(texts)
            rates[str(size)].append(round(len(texts) / (time.perf_counter() - t0), 2))
        C.log(f"[round {r + 1}/{n}] load {os.getloadavg()[0]:.2f} "
              + " ".join(f"{s}:{rates[str(s)][-1]}" for s in sizes))
    return rates


def peak_rss(texts: list[str], sizes: tuple[int, ...]) -> dict[str, Any]:
    out = {}
    for size in sizes:
        proc = subprocess.run([sys.executable, "-c", RSS_CHILD, str(size)], input=json.dumps(texts),
                              capture_output=True, text=True, cwd=C.REPO, check=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        out[str(size)] = json.loads(proc.stdout.strip().splitlines()[-1])
        C.log(f"[rss] batch {size}: {out[str(size)]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--passages", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-rss", action="store_true")
    args = ap.parse_args()
    count, n = (32, 2) if args.quick else (args.passages, args.rounds)
    from marginalia_core.providers.embeddings.local import BATCH_SIZE, LocalEmbedder

    texts = passages(count)
    emb = LocalEmbedder()
    emb.embed_documents(texts[:8])  # model loaded and warm before any timing
    tokens = C.token_counts(emb, texts)
    load = [round(os.getloadavg()[0], 2)]
    rates = rounds(emb, texts, BATCH_SIZES, n)
    load.append(round(os.getloadavg()[0], 2))
    medians = {s: statistics.median(v) for s, v in rates.items()}
    best = max(medians, key=medians.get)
    res: dict[str, Any] = {
        "passages": len(texts), "mean_chars": round(sum(map(len, texts)) / len(texts)),
        "tokens_p50": C.percentile(tokens, 50), "tokens_max": max(tokens), "rounds": n,
        "loadavg_1min_before_after": load, "passages_per_s_by_round": rates,
        "passages_per_s_median": medians, "fastest": int(best),
        "relative_to_fastest": {s: round(m / medians[best], 3) for s, m in medians.items()},
        "project_batch_size": BATCH_SIZE,
    }
    res["command"] = "PYTHONPATH=. python benchmarks/" + " ".join(
        [os.path.basename(sys.argv[0]), *sys.argv[1:]])
    run = "quick" if args.quick else f"{len(texts)}x{n}"
    path = C.write_result("embed_batch", run, res)  # the timings are kept even if RSS fails
    if not args.no_rss:
        res["peak_rss"] = peak_rss(texts, BATCH_SIZES)
        path = C.write_result("embed_batch", run, res)
    print(json.dumps({"written": str(path.relative_to(C.REPO)), "medians": medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
