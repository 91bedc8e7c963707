"""Leave-one-group-out check of the answer-sentence selector's features (issue 22).

The selector's single tune split (10 articles, 300 questions) moves by a question or two between
feature sets, so one figure cannot tell a feature that generalises from noise. This refits the
listwise model once per collected group of ``train_answer_selector.py`` (5 articles each, fit
and tune alike), leaving that group out, and counts the left-out questions whose top-ranked
sentence holds a gold answer (the first-sentence lead, before refusal). Feature sets compared in
one run: every feature, and every feature but those given to ``--drop`` (each alone and all).

Reads the rows ``train_answer_selector.py`` collected (benchmarks/.cache); collects nothing.

    PYTHONPATH=. python benchmarks/selector_ablation.py --drop type_fit rank
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import train_answer_selector as trainer  # noqa: E402

from marginalia_core.providers.answerers import selector  # noqa: E402

FEATURES = list(selector.FEATURES)


def collected() -> list[tuple[str, list[str], dict[str, np.ndarray]]]:
    """(part, articles, rows) of every group already collected."""
    out = []
    for part, group in trainer.groups():
        path = trainer.group_file(part, group)
        if path.exists():
            z = np.load(path)
            if tuple(z["features"]) != selector.FEATURES:
                raise SystemExit(f"{path.name} has other features: collect again")
            out.append((part, list(group), {k: z[k] for k in z.files}))
    return out


def _stack(groups: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    out: dict[str, list] = {k: [] for k in ("x", "y", "q", "answerable")}
    for z in groups:
        trainer.append_rows(out, z)
    return {k: np.asarray(v) for k, v in out.items()}


def leads(train: Sequence[dict], test: dict, columns: Sequence[str]) -> tuple[int, int]:
    """(questions of ``test`` whose top sentence holds the answer, answerable questions),
    the listwise model fitted on ``train`` over ``columns``."""
    a, b = _stack(train), _stack([test])
    idx = [FEATURES.index(c) for c in columns]
    xa, xb = a["x"][:, idx], b["x"][:, idx]
    real_a = ~np.isnan(xa).any(axis=1)
    mean, scale, _, _ = trainer.fit_logistic(xa[real_a], a["y"][real_a].astype(float))
    ranked = real_a & a["answerable"].astype(bool)
    coef = trainer.fit_listwise((xa[ranked] - mean) / scale, a["y"][ranked].astype(float),
                                a["q"][ranked])
    score = ((xb - mean) / scale) @ coef  # NaN for an empty question's placeholder row
    asked = [q for q in trainer.per_question(b["q"], score, b["y"], b["answerable"])
             if q["answerable"]]
    return sum(bool(len(q["y"]) and q["y"][0]) for q in asked), len(asked)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drop", nargs="*", default=[], choices=FEATURES, metavar="FEATURE")
    args = parser.parse_args(argv)
    groups = collected()
    if len(groups) < 2:
        raise SystemExit("collect rows first: PYTHONPATH=. python "
                         "benchmarks/train_answer_selector.py")
    print("groups:", "; ".join(f"{p}:{g[0]}…" for p, g, _ in groups))
    variants = {"every feature": FEATURES}
    for name in args.drop:
        variants[f"without {name}"] = [c for c in FEATURES if c != name]
    if len(args.drop) > 1:
        variants["without " + ", ".join(args.drop)] = [c for c in FEATURES if c not in args.drop]
    for label, columns in variants.items():
        hits = total = 0
        for i, (_, _, test) in enumerate(groups):
            h, n = leads([z for j, (_, _, z) in enumerate(groups) if j != i], test, columns)
            hits, total = hits + h, total + n
        print(f"{label}: lead {hits}/{total} = {hits / total:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
