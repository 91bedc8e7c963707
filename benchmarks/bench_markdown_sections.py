"""Markdown sections: time to find the headings of a file of ordinary headings against one of
the same size whose headings are built to make emphasis matching backtrack ("*a*a*a…"); and
the margin's rendering of a passage whose heading is padded with spaces against an ordinary one.

    python benchmarks/bench_markdown_sections.py [--headings 2000] [--rounds 3]

The two files run alternately, best round kept; the ratio is what matters (before the mark's
text was bounded, the hostile file took ~40 s for 2,000 headings: quadratic in a heading).
"""

from __future__ import annotations

import argparse
import json
import time

import _common as C

from marginalia_app.passages import markdown_html
from marginalia_core.ingest.markup import markdown_sections

PASSAGE_CHARS = 1400  # a chunk's target size


def files(headings: int) -> dict[str, str]:
    hostile = "# " + "*a" * 400
    plain = "# " + ("Results of the field survey " * 30)[: len(hostile) - 2]
    return {name: "\n\nA paragraph of text under it.\n\n".join([line] * headings)
            for name, line in (("ordinary", plain), ("hostile", hostile))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--headings", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200 headings, one round")
    args = ap.parse_args()
    headings, rounds = (200, 1) if args.quick else (args.headings, args.rounds)
    docs = files(headings)
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, text in docs.items():
            t0 = time.perf_counter()
            starts, _units = markdown_sections(text)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
            assert len(starts) == headings, (name, len(starts))
    passages = {"ordinary passage": "# Results\n\n" + "word " * (PASSAGE_CHARS // 5),
                "padded heading": "# a" + " " * PASSAGE_CHARS + "b"}
    for _ in range(rounds):
        for name, text in passages.items():
            t0 = time.perf_counter()
            markdown_html(text)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
    out = {**C.provenance(), "headings": headings, "chars": len(docs["hostile"]),
           "seconds": {k: round(v, 4) for k, v in best.items()},
           "hostile_over_ordinary": round(best["hostile"] / best["ordinary"], 2),
           "padded_over_ordinary_passage": round(best["padded heading"]
                                                 / best["ordinary passage"], 2)}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
