"""The PDFs the harder page-level question set (questions/pdfs_pages_hard.jsonl) adds to
../shared/eval/pdfs: made here from text already on the machine, so nothing is copied into the
repository and every run rebuilds the same bytes.

- ``licence-reader.pdf``: a long single-column book of the free-software licences Debian ships
  in /usr/share/common-licenses (GPL-3, GPL-2, LGPL-2.1, LGPL-3, GFDL-1.3, MPL-2.0, Apache-2.0,
  Artistic), one chapter each, with a running head and a page number on every page. Chapters
  share nearly all their words ("licence", "distribute", "copies", "source code"), which is what
  makes page-level retrieval hard for BM25 and for the embedder alike.
- ``encyclopedia-<article>.pdf``: three SQuAD v1.1 dev articles (../shared/eval, CC BY-SA) set in
  two columns of 9 pt text with a title, a running head and page numbers.

    python benchmarks/made_pdfs.py            # writes them to ~/.cache/marginalia-bench/made-pdfs
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import _common as C
from _cache import CACHE_DIR

_pdf_maker = C.test_helper("pdf_maker")

LICENCES = Path("/usr/share/common-licenses")
BOOK = [  # (file, chapter title)
    ("GPL-3", "The GNU General Public License, version 3"),
    ("GPL-2", "The GNU General Public License, version 2"),
    ("LGPL-2.1", "The GNU Lesser General Public License, version 2.1"),
    ("LGPL-3", "The GNU Lesser General Public License, version 3"),
    ("GFDL-1.3", "The GNU Free Documentation License, version 1.3"),
    ("MPL-2.0", "The Mozilla Public License, version 2.0"),
    ("Apache-2.0", "The Apache License, version 2.0"),
    ("Artistic", "The Artistic License"),
]
BOOK_TITLE = "Free Software Licences: A Reader"
ARTICLES = ["Steam_engine", "Huguenot", "Fresno,_California"]
OUT = CACHE_DIR / "made-pdfs"

# single column: 10 pt every 13 pt, 54 lines from y 740; two columns: 9 pt every 11 pt
BOOK_LINES, BOOK_WIDTH = 54, 96
COL_LINES, COL_WIDTH, COL_X = 60, 52, (50, 318)


def _wrap(paragraphs: list[str], width: int) -> list[str]:
    """Lines of ``width`` characters; a blank line between paragraphs."""
    lines: list[str] = []
    for para in paragraphs:
        para = " ".join(para.split())
        if not para:
            continue
        lines += textwrap.wrap(para, width) + [""]
    return lines


def _paragraphs(text: str) -> list[str]:
    return [p for p in text.replace("\r", "").split("\n\n") if p.strip()]


def licence_book() -> bytes:
    pages: list[list] = []
    for fname, title in BOOK:
        body = _wrap(_paragraphs((LICENCES / fname).read_text(encoding="utf-8")), BOOK_WIDTH)
        lines = [title.upper(), ""] + body
        for start in range(0, len(lines), BOOK_LINES):
            chunk = lines[start : start + BOOK_LINES]
            n = len(pages) + 1
            items = [(72, 760, 8, f"{BOOK_TITLE} \u2014 {title}")]
            items += _pdf_maker.lines_page(chunk, top=735, leading=13, size=10, x=60)
            items.append((300, 40, 8, str(n)))
            pages.append(items)
    return _pdf_maker.text_pdf(pages)


def two_column(title: str, text: str) -> bytes:
    lines = _wrap(_paragraphs(text), COL_WIDTH)
    pages: list[list] = []
    per_page = 2 * COL_LINES
    for start in range(0, len(lines), per_page):
        n = len(pages) + 1
        items = [(50, 765, 8, f"Encyclopedia sampler \u00b7 {title}")]
        top = 745
        if n == 1:
            items.append((50, 745, 16, title))
            top = 720
        chunk = lines[start : start + per_page]
        for col, x in enumerate(COL_X):
            part = chunk[col * COL_LINES : (col + 1) * COL_LINES]
            items += _pdf_maker.lines_page(part, top=top, leading=11, size=9, x=x)
        items.append((300, 30, 8, str(n)))
        pages.append(items)
    return _pdf_maker.text_pdf(pages)


def squad_articles() -> dict[str, str]:
    shared = Path(os.environ.get("MARGINALIA_SHARED_EVAL", C.REPO / ".." / "shared" / "eval"))
    out = {}
    with open(shared / "squad-v1.1-dev" / "articles_derived.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d["_id"] in ARTICLES:
                out[d["_id"]] = d["text"]
    return out


def build(out: Path = OUT) -> list[Path]:
    """Write every made PDF to ``out`` (only when its bytes changed) and return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    made = {"licence-reader.pdf": licence_book()}
    for aid, text in squad_articles().items():
        title = aid.replace("_", " ")
        slug = aid.split(",")[0].lower().replace("_", "-")
        made[f"encyclopedia-{slug}.pdf"] = two_column(title, text)
    paths = []
    for name, data in made.items():
        path = out / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in build():
        print(p, p.stat().st_size, file=sys.stderr)
