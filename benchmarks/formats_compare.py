"""Which library reads each new format: Marginalia's readers (mammoth, python-pptx, openpyxl, csv,
odfpy, ebooklib, trafilatura + BeautifulSoup; ingest/formats.py) against markitdown on the real
files of tests/data/formats (public test suites; their README names each source).

For every file: characters of text, seconds, and the checks that decide whether the passages are
usable for cited answers: the feature each file is known for is present (comments, footnotes,
speaker notes, a row that names its columns, a chapter's verse, a page's article) and what must
not be indexed is absent (menus, scripts). markitdown runs in its own virtualenv (so its
dependencies never enter the project's): ``python3 -m venv /tmp/mdvenv &&
/tmp/mdvenv/bin/pip install "markitdown[docx,pptx,xlsx]==0.1.9"``; without it only our column is
filled.

    PYTHONPATH=. .venv/bin/python benchmarks/formats_compare.py [--markitdown /tmp/mdvenv/bin/python]

Writes benchmarks/results/formats_compare.md.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
from pathlib import Path

from marginalia_core.ingest.formats import extent, extract

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "formats"
OUT = ROOT / "benchmarks" / "results" / "formats_compare.md"
REPEAT = 3  # best of three, seconds

# file -> (what must be there, a regex; what must not be, a regex or "")
CHECKS: dict[str, tuple[str, str, str]] = {
    "comments-rich-para.docx": ("comments kept", r"Text with character style", ""),
    "notes.docx": ("footnote and endnote kept", r"My note[\s\S]*This is an endnote", ""),
    "txt-fit-text.pptx": ("slide text", r"designing typefaces is called type design", ""),
    "ph-inherit-props.pptx": ("speaker notes kept", r"Notes in modified position and size", ""),
    "inventory-table.xlsx": ("a row names its columns", r"Type\W+Banana\W+Quantity\W+200", ""),
    "analysis-data.csv": ("a row names its columns", r"parent_salary\W+6500000", ""),
    "headers.odt": ("headings", r"#+ Another header", ""),
    "wasteland.epub": ("the poem's text", r"April is the cruellest month", ""),
    "creativecommons.org.html": ("the article, not the menus",
                                 r"Creative Commons helps you legally share",
                                 r"CC Store|Search the Commons Share your work|Facebook Twitter"),
}

MARKITDOWN = """
import json, sys, time
from markitdown import MarkItDown
md = MarkItDown()
out = {}
for path in sys.argv[1:]:
    best, text, error = None, "", ""
    for _ in range(__REPEAT__):
        start = time.perf_counter()
        try:
            text = md.convert(path).text_content
        except Exception as exc:
            error = type(exc).__name__ + ": " + str(exc)[:120]
            break
        spent = time.perf_counter() - start
        best = spent if best is None else min(best, spent)
    out[path] = {"text": text, "seconds": best, "error": error}
print(json.dumps(out))
""".replace("__REPEAT__", str(REPEAT))


def ours(path: Path) -> dict:
    data = path.read_bytes()
    best = None
    for _ in range(REPEAT):
        start = time.perf_counter()
        got = extract(path.name, data)
        spent = time.perf_counter() - start
        best = spent if best is None else min(best, spent)
    return {"text": got.text, "seconds": best,
            "locations": extent(got.mime, got.page_count, got.units)}


def verdict(name: str, text: str) -> str:
    _, must, must_not = CHECKS[name]
    flat = " ".join(text.split())
    ok = bool(re.search(must, text) or re.search(must, flat))
    bad = bool(must_not and re.search(must_not, flat))
    return ("yes" if ok else "**no**") + (" (menus in)" if bad else "")


BIG_SHEET_ROWS = 20_000


def big_sheet() -> str:
    """A generated 20,000-row, 5-column ledger: our whole XLSX reader against openpyxl's own
    read-only parse of the same sheet (the floor), in one run."""
    import io

    from openpyxl import Workbook, load_workbook

    book = Workbook()
    sheet = book.active
    sheet.title = "Ledger"
    sheet.append(["Date", "Supplier", "Item", "Amount", "Notes"])
    for i in range(BIG_SHEET_ROWS):
        sheet.append([f"2024-01-{i % 28 + 1:02d}", f"Supplier {i % 97}", f"Item {i}", i * 1.5,
                      "paid by transfer"])
    buffer = io.BytesIO()
    book.save(buffer)
    data = buffer.getvalue()
    start = time.perf_counter()
    floor = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    rows = sum(1 for _ in floor.worksheets[0].iter_rows(values_only=True))
    floor_s = time.perf_counter() - start
    start = time.perf_counter()
    got = extract("ledger.xlsx", data)
    ours_s = time.perf_counter() - start
    return (f"Big sheet: {BIG_SHEET_ROWS:,} rows x 5 columns ({len(data):,} bytes): our reader "
            f"{ours_s:.2f} s ({got.page_count:,} rows, {len(got.text):,} characters); openpyxl's "
            f"read-only parse alone {floor_s:.2f} s ({rows:,} rows): ratio {ours_s / floor_s:.2f}.")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--markitdown", default="/tmp/mdvenv/bin/python",
                        help="a Python with markitdown installed")
    args = parser.parse_args()
    files = [DATA / name for name in CHECKS]
    theirs: dict[str, dict] = {}
    if Path(args.markitdown).exists():
        run = subprocess.run([args.markitdown, "-c", MARKITDOWN, *map(str, files)],
                             capture_output=True, text=True, timeout=600, check=False)
        if run.returncode == 0:
            theirs = {Path(k).name: v for k, v in json.loads(run.stdout).items()}
        else:
            print(run.stderr[-2000:])
    lines = [
        "# Format readers: Marginalia's per-format readers vs markitdown 0.1.9",
        "",
        "`PYTHONPATH=. .venv/bin/python benchmarks/formats_compare.py` (best of "
        f"{REPEAT}; markitdown in its own venv). Check = the feature the file is known for.",
        "",
        "| file | check | ours: check | ours: locations | ours: chars | ours: ms "
        "| markitdown: check | markitdown: chars | markitdown: ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for path in files:
        mine = ours(path)
        other = theirs.get(path.name)
        if other is None:
            cells = ["–", "–", "–"]
        elif other["error"]:
            cells = [f"fails: {other['error'][:60]}", "0", "–"]
        else:
            cells = [verdict(path.name, other["text"]), str(len(other["text"])),
                     f"{other['seconds'] * 1000:.1f}"]
        lines.append(
            f"| {path.name} | {CHECKS[path.name][0]} | {verdict(path.name, mine['text'])} | "
            f"{mine['locations']} | "
            f"{len(mine['text'])} | {mine['seconds'] * 1000:.1f} | " + " | ".join(cells) + " |"
        )
    lines += ["", big_sheet()]
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
