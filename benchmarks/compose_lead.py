"""How often the offline answer's first sentence holds the answer, against how often the
selector's top-ranked sentence does (issue 22), on the SQuAD *train* articles that
``train_answer_selector.py`` collects (never the held-out ones).

The two differ by what ``ExtractiveAnswerer.compose`` does after ranking: the sentence that
says who "he" is, the bold opening, refusal. Run it on two trees (a git worktree of the
commit before) to see what a change of composition does, with the ranking held fixed.

    PYTHONPATH=. python benchmarks/compose_lead.py            # the 5 collected groups
    PYTHONPATH=. python benchmarks/compose_lead.py --groups 1 3
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import squad_answers as sa  # noqa: E402
import train_answer_selector as trainer  # noqa: E402

from marginalia_core.providers.answerers import selector  # noqa: E402
from marginalia_core.providers.answerers.extractive import (  # noqa: E402
    ExtractiveAnswerer,
    is_refusal,
)


def group_rows(part: str, group: Sequence[str]) -> list[dict]:
    """Per question of ``group``: does the top-ranked sentence, the answer's first sentence,
    the whole answer hold a gold answer; was it refused."""
    model = selector.load_model()
    rows = []
    with trainer.indexed_group(group) as (ws, _):
        answerer = ExtractiveAnswerer(ws.settings, embedder=ws.embedder, strategy="learned")
        for q in trainer.group_questions(group):
            sources = ws.sources(ws.search(q["question"]))
            pool, x = answerer.featurize(q["question"], sources)
            answer = answerer.compose(q["question"], sources)
            best = pool[int(np.argmax(model.ranks(x)))].text if pool else ""
            rows.append({
                "part": part,
                "pool": any(sa.contains_answer(c.text, q["answers"]) for c in pool),
                "best": bool(best) and sa.contains_answer(best, q["answers"]),
                "lead": sa.contains_answer(sa.first_sentence(sa.strip_marks(answer)),
                                           q["answers"]),
                "whole": sa.contains_answer(sa.strip_marks(answer), q["answers"]),
                "refused": is_refusal(answer),
            })
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", nargs="+", type=int,
                        default=list(range(len(trainer.groups()))))
    args = parser.parse_args(argv)
    groups = trainer.groups()
    rows: list[dict] = []
    for i in args.groups:
        part, group = groups[i]
        rows += group_rows(part, group)
    out = {}
    for part in ("fit", "tune", "all"):
        sel = [r for r in rows if part in ("all", r["part"])]
        if sel:
            out[part] = {"questions": len(sel),
                         **{k: sum(r[k] for r in sel) for k in
                            ("pool", "best", "lead", "whole", "refused")},
                         "best_not_lead": sum(r["best"] and not r["lead"] for r in sel)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
