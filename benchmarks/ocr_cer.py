"""OCR accuracy (character error rate) and speed (pages/s), tesseract vs rapidocr-onnxruntime.

Scans made here: text PDFs of ../shared/eval/pdfs are rendered to page images (pypdfium2,
grayscale, RASTER_DPI), rebuilt as an image-only PDF (``ocr.rasterize_pdf``) and read back by
the app's own extraction (``extract``, which OCRs every page without a text layer); the original's
text layer (the same extraction, so the same cleanup) is the reference. The eval set's real scan,
the Vicksburg book pages, has only an older OCR text layer as reference, so its CER measures
agreement between two OCRs (an upper bound on our error); the CCITT fax "scan" is a 16x16
pixel image with no text at all (it must be refused, which tests/test_ocr.py checks).

CER = Levenshtein distance / reference length, whitespace runs folded to one space, case and
punctuation kept; summed over pages (long pages weigh more). Pages/s is the OCR wall time per
page in this run (the render is included; the text-layer reading is not).

    python benchmarks/ocr_cer.py                         # tesseract, writes results/ocr_cer.json
    python benchmarks/ocr_cer.py --quick                 # one document, for smoke runs
    /tmp/rvenv/bin/python benchmarks/ocr_cer.py --engine rapidocr --pages-from-cache
        # rapidocr in its own venv (it needs opencv; not a project dependency) on the page
        # images the tesseract run cached; merged into the same results file

rapidocr-onnxruntime is measured only for the engine choice; it is not installed by the project.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
CACHE = BENCH / ".cache" / "ocr"
PDFS = (REPO / ".." / "shared" / "eval" / "pdfs").resolve()
# Text PDFs that become our own scans (prose, a Google Doc with a table, two columns, LaTeX).
OWN_SCANS = [
    "sf__crazyones-pdfa.pdf",
    "sf__google-doc-document.pdf",
    "sf__pdflatex-4-pages.pdf",
    "sf__multicolumn.pdf",
]
REAL_SCANS = ["pypdf__Seige_of_Vicksburg_Sample_OCR.pdf"]
QUICK = ["sf__crazyones-pdfa.pdf"]


def levenshtein(a: str, b: str) -> int:
    """Edit distance, one numpy row at a time (insertions via a running minimum)."""
    if not a:
        return len(b)
    if not b:
        return len(a)
    bb = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    idx = np.arange(len(b) + 1, dtype=np.int64)
    prev = idx.copy()
    codes = np.frombuffer(a.encode("utf-32-le"), dtype=np.uint32)
    for i, code in enumerate(codes, start=1):
        cur = np.empty_like(prev)
        cur[0] = i
        sub = prev[:-1] + (bb != code)
        cur[1:] = np.minimum(prev[1:] + 1, sub)
        # D[i][j] = min_k<=j (cur[k] + j - k): a running minimum of cur - idx
        cur = np.minimum.accumulate(cur - idx) + idx
        prev = cur
    return int(prev[-1])


def fold(text: str) -> str:
    return " ".join(text.split())


def _text_pages(data: bytes) -> list[str]:
    from marginalia_core.ingest.formats import extract

    got = extract("x.pdf", data, ocr=False)
    starts = [*got.page_starts, len(got.text)]
    return [got.text[starts[i]:starts[i + 1]] for i in range(got.page_count)]


def _ocr_pages_tesseract(data: bytes) -> tuple[list[str], float]:
    from marginalia_core.ingest.formats import extract

    t0 = time.perf_counter()
    got = extract("scan.pdf", data, ocr=True)
    seconds = time.perf_counter() - t0
    starts = [*got.page_starts, len(got.text)]
    return [got.text[starts[i]:starts[i + 1]] for i in range(got.page_count)], seconds


def _page_pngs(data: bytes, dpi: int) -> list[bytes]:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data)
    out = []
    for page in pdf:
        buf = io.BytesIO()
        page.render(scale=dpi / 72, grayscale=True).to_pil().save(buf, format="PNG")
        out.append(buf.getvalue())
        page.close()
    pdf.close()
    return out


def _ocr_pages_rapidocr(pngs: list[bytes]) -> tuple[list[str], float]:
    from rapidocr_onnxruntime import RapidOCR  # type: ignore[import-not-found]

    engine = RapidOCR()
    t0 = time.perf_counter()
    texts = []
    for png in pngs:
        result, _ = engine(png)
        texts.append("\n".join(r[1] for r in (result or [])))
    return texts, time.perf_counter() - t0


def _score(refs: list[str], hyps: list[str]) -> dict[str, Any]:
    dist = chars = 0
    pages = []
    for ref, hyp in zip(refs, hyps, strict=True):
        r, h = fold(ref), fold(hyp)
        d = levenshtein(r, h)
        dist += d
        chars += len(r)
        pages.append(round(d / len(r), 4) if r else None)
    return {"cer": round(dist / chars, 4) if chars else None, "edits": dist,
            "reference_chars": chars, "page_cer": pages}


def run_tesseract(names: list[str], dpi: int) -> dict[str, Any]:
    from marginalia_core.ingest import ocr

    CACHE.mkdir(parents=True, exist_ok=True)
    docs: dict[str, Any] = {}
    for name in names:
        original = (PDFS / name).read_bytes()
        refs = _text_pages(original)
        scan = ocr.rasterize_pdf(original, dpi=dpi)
        hyps, seconds = _ocr_pages_tesseract(scan)
        for i, png in enumerate(_page_pngs(scan, ocr.OCR_DPI)):  # what tesseract saw
            (CACHE / f"{name}.{i + 1}.png").write_bytes(png)
        (CACHE / f"{name}.refs.json").write_text(json.dumps(refs))
        score = _score(refs, hyps)
        docs[name] = {"kind": "real scan (reference: its old OCR layer)" if name in REAL_SCANS
                      else "own scan (reference: the text layer)", "pages": len(refs),
                      "seconds": round(seconds, 2),
                      "pages_per_s": round(len(refs) / seconds, 3), **score}
        print(f"tesseract {name}: CER {score['cer']} {len(refs)} pages {seconds:.1f}s",
              file=sys.stderr, flush=True)
    return docs


def run_rapidocr(names: list[str]) -> dict[str, Any]:
    docs: dict[str, Any] = {}
    for name in names:
        refs = json.loads((CACHE / f"{name}.refs.json").read_text())
        pngs = [(CACHE / f"{name}.{i + 1}.png").read_bytes() for i in range(len(refs))]
        hyps, seconds = _ocr_pages_rapidocr(pngs)
        score = _score(refs, hyps)
        docs[name] = {"pages": len(refs), "seconds": round(seconds, 2),
                      "pages_per_s": round(len(refs) / seconds, 3), **score}
        print(f"rapidocr {name}: CER {score['cer']} {len(refs)} pages {seconds:.1f}s",
              file=sys.stderr, flush=True)
    return docs


def _totals(docs: dict[str, Any], own: bool) -> dict[str, Any]:
    keep = [d for n, d in docs.items() if (n not in REAL_SCANS) == own]
    edits = sum(d["edits"] for d in keep)
    chars = sum(d["reference_chars"] for d in keep)
    pages = sum(d["pages"] for d in keep)
    seconds = sum(d["seconds"] for d in keep)
    return {"cer": round(edits / chars, 4) if chars else None, "pages": pages,
            "pages_per_s": round(pages / seconds, 3) if seconds else None}


def markdown(stored: dict[str, Any]) -> str:
    lines = ["# OCR: character error rate and speed", "",
             "Written by `benchmarks/ocr_cer.py` (see its docstring for the method). CER: edit "
             "distance / reference characters, whitespace folded. Own scans: eval text PDFs "
             "rendered to images and rebuilt image-only, reference = their text layer. Real "
             "scan: the Vicksburg pages, reference = their older OCR layer (agreement, not truth).",
             ""]
    for run, data in stored.items():
        lines += [f"## {run}", "", f"`{data.get('command', '')}` — {data.get('recorded', '')}, "
                  f"load average at start {data.get('load_average')}", ""]
        lines += ["| engine | document | pages | CER | pages/s |", "|---|---|---|---|---|"]
        for engine in ("tesseract", "rapidocr"):
            for name, d in (data.get(engine) or {}).items():
                lines.append(f"| {engine} | {name} | {d['pages']} | {d['cer']} | "
                             f"{d['pages_per_s']} |")
        for engine in ("tesseract", "rapidocr"):
            docs = data.get(engine) or {}
            if docs:
                own, real = _totals(docs, True), _totals(docs, False)
                lines.append(f"| **{engine}** | own scans, all | {own['pages']} | "
                             f"**{own['cer']}** | {own['pages_per_s']} |")
                if real["pages"]:
                    lines.append(f"| **{engine}** | real scan (vs old OCR) | {real['pages']} | "
                                 f"**{real['cer']}** | {real['pages_per_s']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=["tesseract", "rapidocr"], default="tesseract")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="+", metavar="PDF", help="these eval PDFs only")
    ap.add_argument("--dpi", type=int, default=200, help="dpi of the scans we make")
    ap.add_argument("--psm", type=int, help="tesseract page segmentation mode to try")
    ap.add_argument("--ocr-dpi", type=int, help="dpi the OCR renders pages at, to try")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    if args.psm is not None:
        from marginalia_core.ingest import ocr

        ocr.OCR_PSM = args.psm
    if args.ocr_dpi is not None:
        from marginalia_core.ingest import ocr

        ocr.OCR_DPI = args.ocr_dpi
    import os

    names = args.only or (QUICK if args.quick else OWN_SCANS + REAL_SCANS)
    run_kind = "quick" if args.quick else "full"
    load = [round(x, 2) for x in os.getloadavg()]
    docs = run_tesseract(names, args.dpi) if args.engine == "tesseract" else run_rapidocr(names)
    if args.no_save:
        print(json.dumps(docs, indent=1))
        return 0
    path = RESULTS / "ocr_cer.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    entry = stored.setdefault(run_kind, {})
    if args.engine == "tesseract":
        entry.update({"command": "python benchmarks/ocr_cer.py " + " ".join(argv or sys.argv[1:]),
                      "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "load_average": load, "dpi": args.dpi})
    entry[args.engine] = docs
    entry[f"{args.engine}_load_average"] = load
    path.write_text(json.dumps(stored, indent=1) + "\n")
    (RESULTS / "ocr_cer.md").write_text(markdown(stored) + "\n")
    print(markdown(stored))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
