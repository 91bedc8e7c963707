"""Page view render time: a cited PDF page as a highlighted JPEG, per page.

    python benchmarks/bench_page_view.py            # every page of the PDFs below (max 20 each)
    python benchmarks/bench_page_view.py --quick    # the sample PDF and pdflatex-4-pages only

For each page of each PDF, in one run on this machine:

- ``baseline``: pypdfium2 alone renders the page at the same scale to a PIL image (no text,
  no highlight, no encoding): the floor any page view pays;
- ``cold``: ``PageRenderer.render`` on an empty cache: open, render, read every character box,
  find the page's first sentence, paint it, encode JPEG (what the first view of a page costs);
- ``warm``: the same page again with another sentence: cache hit, paint, encode (what opening
  another citation on a page already seen costs).

The target is < 1 s a page (issue 11); results in benchmarks/results/page_view.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import _common as C
import pypdfium2 as pdfium

from marginalia_core.ingest.page_images import MAX_SCALE, TARGET_WIDTH_PX, PageRenderer

TARGET_S = 1.0
MAX_PAGES = 20
FULL_PDFS = (
    C.REPO / "samples" / "caring-for-old-books.pdf",
    C.PDF_DIR / "sf__pdflatex-4-pages.pdf",
    C.PDF_DIR / "sf__multicolumn.pdf",
    C.PDF_DIR / "sf__google-doc-document.pdf",
    C.PDF_DIR / "pypdf__side-by-side-subfig.pdf",
    C.GEOTOPO,
)
QUICK_PDFS = FULL_PDFS[:2]


def _sentences(data: bytes, page_number: int) -> list[str]:
    """Two sentences of the page's own text: the cited passages of the cold and warm views."""
    pdf = pdfium.PdfDocument(data)
    try:
        textpage = pdf[page_number - 1].get_textpage()
        text = " ".join(textpage.get_text_range().split())
    finally:
        pdf.close()
    parts = [p for p in re.split(r"(?<=[.!?])\s+", text) if len(p) > 30]
    return (parts + ["", ""])[:2] if parts else ["", ""]


def _baseline(data: bytes, page_number: int) -> float:
    t0 = time.perf_counter()
    pdf = pdfium.PdfDocument(data)
    page = pdf[page_number - 1]
    width, _ = page.get_size()
    page.render(scale=min(MAX_SCALE, TARGET_WIDTH_PX / width)).to_pil()
    pdf.close()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    run = "quick" if args.quick else "full"
    per_pdf = []
    baseline, cold, warm = [], [], []
    highlighted = pages_total = 0
    for path in QUICK_PDFS if args.quick else FULL_PDFS:
        if not Path(path).exists():
            C.log("missing", path)
            continue
        data = Path(path).read_bytes()
        pdf = pdfium.PdfDocument(data)
        count = min(len(pdf), MAX_PAGES)
        pdf.close()
        b_s, c_s, w_s = [], [], []
        for number in range(1, count + 1):
            first, second = _sentences(data, number)
            b_s.append(_baseline(data, number))
            renderer = PageRenderer()
            t0 = time.perf_counter()
            image = renderer.render(path.name, data, [number], [first] if first else [])
            c_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            renderer.render(path.name, data, [number], [second] if second else [])
            w_s.append(time.perf_counter() - t0)
            highlighted += image.highlighted > 0
            pages_total += 1
        baseline += b_s
        cold += c_s
        warm += w_s
        per_pdf.append({
            "pdf": Path(path).name, "pages": count,
            "baseline": C.summary_ms(b_s), "cold": C.summary_ms(c_s), "warm": C.summary_ms(w_s),
        })
        C.log(Path(path).name, count, "pages; cold p95", C.summary_ms(c_s)["p95_ms"], "ms")
    res = {
        "target_s_per_page": TARGET_S,
        "pages": pages_total,
        "pages_with_highlight": highlighted,
        "baseline": C.summary_ms(baseline),
        "cold": C.summary_ms(cold),
        "warm": C.summary_ms(warm),
        "cold_over_baseline_p50": C.ratio(C.percentile(cold, 50), C.percentile(baseline, 50)),
        "max_cold_s": round(max(cold), 4) if cold else None,
        "meets_target": bool(cold) and max(cold) < TARGET_S,
        "per_pdf": per_pdf,
    }
    path = C.write_result("page_view", run, res)
    print(json.dumps({"written": str(path.relative_to(C.REPO)), "run": run,
                      "cold_p95_ms": res["cold"]["p95_ms"], "max_cold_s": res["max_cold_s"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
