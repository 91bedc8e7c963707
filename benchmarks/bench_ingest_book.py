"""Book-sized ingestion against its own floor, and overlap and memory.

``floor`` (issue 26): in one run on a 352-page book with running heads, the local embedder
alone on the book's passages (the floor: what embedding them costs, nothing else), before and
after whole ingestion (reading, cleaning, chunking, embedding, storing) into an empty library,
then a second ingestion of a re-saved copy of the book (other bytes, the same text; it replaces
the first, as a person would choose) that takes every vector from the embedding cache. Targets:
ingestion within 1.15x of the floor (the mean of the two floor runs, so a drifting load weighs
on both), the re-saved copy under 0.1x of the first ingestion; the embedding progress events
of the ingestion are checked to never decrease.

``book``: pages/s with reading and embedding overlapped against the sequential pipeline
(MARGINALIA_EMBED_WHILE_READING off) in the same run, in ABBA blocks (sequential, overlapped,
overlapped, sequential) so a load that drifts during the run weighs on both modes alike;
``rss``: peak RSS on a 1,000-page PDF. (Batch size: embed_batch.py.)

    PYTHONPATH=. python benchmarks/bench_ingest_book.py --skip book,rss        # floor only
    PYTHONPATH=. python benchmarks/bench_ingest_book.py                        # full
    PYTHONPATH=. python benchmarks/bench_ingest_book.py --skip rss --pages 60  # a few minutes
    PYTHONPATH=. python benchmarks/bench_ingest_book.py --quick    # 60 pages, 200-page RSS

The book is written once to benchmarks/.cache with tests/pdf_maker.py from SQuAD article text
(every page different, ~2,400 characters: the 352-page / 687-passage class of the issue),
because ../shared/eval/pdfs holds no book that long. Peak RSS is measured in a child process
per size (``resource.getrusage(RUSAGE_CHILDREN)``), with the model loaded and nothing indexed
as the baseline of the same run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import _common as C

from marginalia_core.config import Settings
from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.store.sqlite import Store

_pdf_maker = C.test_helper("pdf_maker")  # the tests' PDF writer, loaded by file path
text_pdf = _pdf_maker.text_pdf

PAGE_CHARS = 2400
LINE_CHARS = 95
FULL_PAGES = 352  # the book: 352 pages, ~690 passages


def book(pages: int) -> bytes:
    """``pages`` pages of SQuAD article text (the same text for the same count), cached."""
    out = C.CACHE / "books" / f"squad-book-{pages}.pdf"
    if out.exists():
        return out.read_bytes()
    articles, _ = C.load_squad()
    text = "\n\n".join(a["text"] for a in sorted(articles.values(), key=lambda a: a["_id"]))
    while len(text) < pages * PAGE_CHARS:
        text += "\n\n" + text
    page_texts = []
    for n in range(pages):
        chunk = text[n * PAGE_CHARS:(n + 1) * PAGE_CHARS]
        page_texts.append("\n".join(textwrap.wrap(chunk, LINE_CHARS)))
    data = text_pdf(page_texts)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return data


def headed_book(pages: int) -> bytes:
    """The book with what a typeset book prints on every page: a running head with the page
    number (the book's title on even pages, the chapter's on odd ones), which cleanup removes
    only after it has seen it repeat, so reading and embedding must agree on the cleaned text."""
    out = C.CACHE / "books" / f"squad-book-headed-{pages}.pdf"
    if out.exists():
        return out.read_bytes()
    articles, _ = C.load_squad()
    text = "\n\n".join(a["text"] for a in sorted(articles.values(), key=lambda a: a["_id"]))
    while len(text) < pages * PAGE_CHARS:
        text += "\n\n" + text
    page_texts = []
    for n in range(1, pages + 1):
        body = text[(n - 1) * PAGE_CHARS:n * PAGE_CHARS]
        head = (f"{n} A READER OF WIKIPEDIA ARTICLES" if n % 2 == 0
                else f"CHAPTER {1 + n // 24}. SELECTED ARTICLES {n}")
        page_texts.append(head + "\n\n" + "\n".join(textwrap.wrap(body, LINE_CHARS)))
    data = text_pdf(page_texts)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return data


def resaved(data: bytes) -> bytes:
    """The PDF written again by another program (pypdf): other bytes, the same text."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.add_metadata({"/Producer": "a re-saving viewer"})
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def embed_floor(data: bytes, emb: Any, settings: Settings) -> dict[str, Any]:
    """The embedder alone on the distinct passages ingestion makes of the book."""
    from marginalia_core.ingest.chunking import chunk_text
    from marginalia_core.ingest.formats import extract

    extracted = extract("book.pdf", data, max_bytes=settings.max_upload_bytes)
    chunks = chunk_text(extracted.text, target=settings.retrieval.chunk_target,
                        overlap=settings.retrieval.chunk_overlap,
                        page_starts=extracted.page_starts)
    texts = list(dict.fromkeys(c.text for c in chunks))
    load = _load()
    t0 = time.perf_counter()
    emb.embed_documents(texts)
    return {"seconds": round(time.perf_counter() - t0, 2), "passages": len(texts),
            "loadavg_1min_before_after": [load, _load()]}


def timed_ingest(store: Store, data: bytes, emb: Any, settings: Settings, name: str
                 ) -> dict[str, Any]:
    """One ingestion, timed, with its embedding progress checked for a decrease."""
    load = _load()
    t0 = time.perf_counter()
    progress: list[tuple[int, int]] = []
    last: dict[str, Any] = {}
    for event in ingest_bytes(store, emb, settings, name, data):
        if event.get("stage") == "embedding":
            progress.append((int(event["done"]), int(event["total"])))
            cached = int(event.get("cached", 0))
        last = event
    seconds = time.perf_counter() - t0
    if last.get("type") != "done":
        raise RuntimeError(f"ingest failed: {last}")
    done = [d for d, _ in progress]
    return {"seconds": round(seconds, 2), "pages": last["document"]["page_count"],
            "passages": last["document"]["chunk_count"],
            "embedded": progress[-1][1] if progress else 0, "reused_from_cache": cached,
            "progress_events": len(progress),
            "progress_never_decreased": done == sorted(done),
            "totals_seen": sorted({t for _, t in progress}),
            "loadavg_1min_before_after": [load, _load()]}


def bench_floor(pages: int, emb: Any, tmp: Path) -> dict[str, Any]:
    data = headed_book(pages)
    db = tmp / "floor.db"
    settings = Settings(db_path=str(db), embedder="local", answerer="extractive",
                        max_upload_mb=500, on_duplicate="replace")
    before = embed_floor(data, emb, settings)
    C.log(f"[floor] embedder alone {before}")
    store = Store(db)
    first = timed_ingest(store, data, emb, settings, "book.pdf")
    C.log(f"[floor] ingestion {first}")
    copy = resaved(data)
    second = timed_ingest(store, copy, emb, settings, "book (re-saved).pdf")
    C.log(f"[floor] re-saved copy {second}")
    store.close()
    after = embed_floor(data, emb, settings)
    C.log(f"[floor] embedder alone again {after}")
    floor = (before["seconds"] + after["seconds"]) / 2
    return {
        "book": f"{pages}-page PDF of SQuAD article text with running heads "
                f"(benchmarks/.cache/books/squad-book-headed-{pages}.pdf, "
                f"{round(len(data) / 2**20, 2)} MB; re-saved copy {round(len(copy) / 2**20, 2)} MB)",
        "floor_before": before, "ingestion": first, "resaved_copy": second,
        "floor_after": after, "floor_seconds": round(floor, 2),
        "ingestion_over_floor": round(first["seconds"] / floor, 3),
        "resaved_over_ingestion": round(second["seconds"] / first["seconds"], 4),
        "targets": {"ingestion_over_floor": 1.15, "resaved_over_ingestion": 0.1},
        "cpus": os.cpu_count(),
    }


def ingest_once(data: bytes, emb: Any, tmp: Path, *, overlap: bool, tag: str) -> dict[str, Any]:
    db = tmp / f"{tag}.db"
    settings = Settings(db_path=str(db), embedder="local", answerer="extractive",
                        embed_while_reading=overlap, max_upload_mb=500)
    store = Store(db)
    t0 = time.perf_counter()
    last: dict[str, Any] = {}
    read_done = None
    for event in ingest_bytes(store, emb, settings, "book.pdf", data):
        if event.get("stage") == "chunking" and read_done is None:
            read_done = time.perf_counter() - t0
        last = event
    seconds = time.perf_counter() - t0
    store.close()
    if last.get("type") != "done":
        raise RuntimeError(f"ingest failed: {last}")
    doc = last["document"]
    return {"seconds": round(seconds, 2), "reading_s": round(read_done or 0, 2),
            "pages": doc["page_count"], "passages": doc["chunk_count"],
            "pages_per_s": round(doc["page_count"] / seconds, 2)}


# One block of runs: sequential, overlapped, overlapped, sequential. Against a load that rises
# or falls steadily both modes then see the same average load, which alternating AB does not.
ABBA = ("sequential", "overlapped", "overlapped", "sequential")


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def bench_book(pages: int, blocks: int, emb: Any, tmp: Path) -> dict[str, Any]:
    """``blocks`` ABBA blocks of the book ingested with reading and embedding overlapped and
    sequentially; pages/s per mode (median over runs) and the overlapped/sequential speed ratio
    per block (each block's runs saw the same load on average), with its median."""
    data = book(pages)
    runs: dict[str, list[dict[str, Any]]] = {"sequential": [], "overlapped": []}
    ratios: list[float] = []
    load = [round(os.getloadavg()[0], 2)]
    for block in range(blocks):
        seconds = {"sequential": 0.0, "overlapped": 0.0}
        for i, mode in enumerate(ABBA):
            run = ingest_once(data, emb, tmp, overlap=mode == "overlapped",
                              tag=f"{mode}-{block}-{i}")
            run["loadavg_1min"] = round(os.getloadavg()[0], 2)
            runs[mode].append(run)
            seconds[mode] += run["seconds"]
            C.log(f"[book] block {block + 1}/{blocks} {mode} {run}")
        ratios.append(round(seconds["sequential"] / seconds["overlapped"], 3))
    load.append(round(os.getloadavg()[0], 2))
    rates = {mode: _median([r["pages_per_s"] for r in rs]) for mode, rs in runs.items()}
    return {"pages": pages, "passages": runs["overlapped"][0]["passages"], "blocks": blocks,
            "order": "ABBA per block: " + ", ".join(ABBA),
            "loadavg_1min_before_after": load, "runs": runs,
            "pages_per_s": rates, "speedup_per_block": ratios,
            "speedup": _median(ratios)}


RSS_CHILD = """
import resource, sys, json
from pathlib import Path
from marginalia_core.config import Settings
from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.providers.embeddings.local import LocalEmbedder
from marginalia_core.store.sqlite import Store
pdf, db, mode = sys.argv[1], sys.argv[2], sys.argv[3]
emb = LocalEmbedder()
emb.embed_documents(["warm up"] * 8)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = {"model_loaded_kb": base}
if mode == "ingest":
    data = Path(pdf).read_bytes()
    settings = Settings(db_path=db, embedder="local", max_upload_mb=500)
    store = Store(db)
    last = list(ingest_bytes(store, emb, settings, "big.pdf", data))[-1]
    out["chunks"] = last.get("document", {}).get("chunk_count")
    out["pdf_mb"] = round(len(data) / 2**20, 2)
out["peak_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(out))
"""


def peak_rss(pages_list: list[int], tmp: Path) -> dict[str, Any]:
    """Peak RSS of a child that loads the model and ingests a PDF of each size (page text of
    ~600 characters, so 1,000 pages stay a few minutes), next to a child that only loads."""
    results: dict[str, Any] = {}
    for label, pages in [("model_only", 0), *[(f"{p}_pages", p) for p in pages_list]]:
        pdf = tmp / f"rss-{pages}.pdf"
        if pages:
            short = [p[:600] for p in C_book_pages(pages)]
            pdf.write_bytes(text_pdf(short))
        proc = subprocess.run(
            [sys.executable, "-c", RSS_CHILD, str(pdf), str(tmp / f"rss-{pages}.db"),
             "ingest" if pages else "load"],
            capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
            cwd=C.REPO, check=True,
        )
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["peak_mb"] = round(row["peak_kb"] / 1024, 1)
        results[label] = row
        C.log(f"[rss] {label}: {row}")
    return results


def C_book_pages(pages: int) -> list[str]:
    return _pdf_maker.book_pages(pages, lines=8)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip", default="", help="comma-separated: floor,book,rss (batch is "
                    "accepted; the batch-size benchmark is benchmarks/embed_batch.py)")
    ap.add_argument("--reps", type=int, default=1,
                    help="ABBA blocks of the book (each: 2 runs per mode)")
    ap.add_argument("--pages", type=int, default=None,
                    help=f"book length (default {FULL_PAGES}; --quick 60)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(","))) - {"batch"}
    pages = args.pages or (60 if args.quick else FULL_PAGES)
    run = "quick" if args.quick else "full"
    if not args.quick and (skip or pages != FULL_PAGES):  # a partial run keeps the full one
        run = "custom-" + "-".join([f"{pages}p", *(f"no-{s}" for s in sorted(skip))])
    tmp = Path(tempfile.mkdtemp(prefix="bench-book-"))
    from marginalia_core.providers.embeddings.local import LocalEmbedder

    emb = LocalEmbedder()
    res: dict[str, Any] = {}
    t0 = time.perf_counter()
    if "floor" not in skip:
        res["floor"] = bench_floor(pages, emb, tmp)
        C.log(f"[floor] ingestion/floor {res['floor']['ingestion_over_floor']}, "
              f"re-saved/ingestion {res['floor']['resaved_over_ingestion']}")
    if "book" not in skip:
        res["book"] = bench_book(pages, args.reps, emb, tmp)
        C.log(f"[book] {res['book']['pages_per_s']} speedup {res['book']['speedup']}")
    if "rss" not in skip:
        res["peak_rss"] = peak_rss([100, 200] if args.quick else [100, 1000], tmp)
    res["children_maxrss_kb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    res["seconds_total"] = round(time.perf_counter() - t0, 1)
    res["command"] = "python benchmarks/" + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    path = C.write_result("ingest_book", run, res)
    print(json.dumps({"written": str(path.relative_to(C.REPO)), "run": run}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
