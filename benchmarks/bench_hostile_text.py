"""Text that made a regular expression backtrack, against ordinary text of the same length, in
the functions that read documents and show passages (a ReDoS sweep of every pattern).

    python benchmarks/bench_hostile_text.py [--chars 8000] [--rounds 3]

Each pair runs alternately, best round kept; the ratio hostile / ordinary is what matters (the
machine is shared). Before the fixes, at 8,000 characters: inline code in the margin 4.2 s
(cubic), a PDF page's hyphen joins 1.2 s, glued footnotes 0.8 s (quadratic); a Markdown file of
2,000 headings "# *a*a*a…" 42.6 s to find its sections; a margin heading padded with 1,400
spaces 2.35 s per card.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import _common as C

from marginalia_app import presentation as fmt
from marginalia_app.passages import markdown_html
from marginalia_core.ingest.cleanup import clean_line
from marginalia_core.ingest.extraction import normalize_pdf_text
from marginalia_core.ingest.markup import markdown_sections

HEADINGS = 2000  # headings in each Markdown file
PASSAGE_CHARS = 1400  # a chunk's target size


def markdown_files(headings: int) -> tuple[str, str]:
    """(hostile, ordinary): headings built to make emphasis matching backtrack, and ordinary
    headings of the same length, each over a paragraph."""
    hostile = "# " + "*a" * 400
    plain = "# " + ("Results of the field survey " * 30)[: len(hostile) - 2]
    return tuple("\n\nA paragraph of text under it.\n\n".join([line] * headings)  # type: ignore[return-value]
                 for line in (hostile, plain))


def cases(n: int) -> dict[str, tuple[Callable[[str], object], str, str]]:
    """name: (function, hostile input, ordinary input of the same length)."""
    count = HEADINGS if n >= 8000 else HEADINGS // 4  # --quick: fewer
    prose = ("The survey found twelve wells in the valley. " * (n // 40 + 1))[:n]
    return {
        "margin inline code": (markdown_html, "a" + "`" * n, prose),
        "PDF hyphen joins (letters)": (normalize_pdf_text, "a" * n, prose),
        "PDF hyphen joins (a-a-)": (normalize_pdf_text, "a-" * (n // 2), prose),
        "glued footnotes": (clean_line, "a" * n, prose),
        "quoted answer highlight": (lambda s: fmt.highlight_spans(prose, [s]), "\u201c" * n, prose),
        f"Markdown sections ({count:,} headings '# *a*a…')": (
            markdown_sections, *markdown_files(count)),
        "margin heading padded with spaces": (
            markdown_html, "# a" + " " * PASSAGE_CHARS + "b",
            "# Results\n\n" + "word " * (PASSAGE_CHARS // 5)),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=8000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2,000 characters, one round")
    args = ap.parse_args()
    n, rounds = (2000, 1) if args.quick else (args.chars, args.rounds)
    best: dict[str, dict[str, float]] = {}
    for _ in range(rounds):
        for name, (fn, hostile, ordinary) in cases(n).items():
            for kind, text in (("hostile", hostile), ("ordinary", ordinary)):
                t0 = time.perf_counter()
                fn(text)
                took = time.perf_counter() - t0
                slot = best.setdefault(name, {})
                slot[kind] = min(slot.get(kind, float("inf")), took)
    out = {**C.provenance(), "chars": n, "seconds": {
        name: {k: round(v, 4) for k, v in t.items()} for name, t in best.items()}}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
