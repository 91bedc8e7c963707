"""Tune the extractive answerer's constants on SQuAD dev *train* articles, offline.

    python benchmarks/extractive_tuning.py              # the grid below on squad_answers' full set
    python benchmarks/extractive_tuning.py --questions 150

Retrieval does not depend on the answerer, so every question is retrieved once (the app's own
hybrid retrieval over the real ingestion, as benchmarks/squad_answers.py does it); then each
grid point composes every answer from the same sources, with the sentence embeddings memoized
by text, so a grid point costs a few seconds. Scored like squad_answers: ``answer_rate`` (an
answer span in the answer text), ``lead_rate`` (in its first sentence) and mean answer length
(characters and words). Prints one JSON line per grid point,
best answer rate first; the held-out figures come from squad_answers.py --heldout, never here.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import squad_answers as sa

from marginalia_core.config import Settings
from marginalia_core.providers.answerers import extractive
from marginalia_core.providers.embeddings.local import LocalEmbedder
from marginalia_core.workspace import Workspace

GRID = {  # issue 11's second round: the phrase and rare-word cues, and how close a second
    # sentence must score to join (the first round's NEIGHBOUR_WEIGHT / CONTINUATION_RATIO /
    # DENSE_WEIGHT grid was flat within +-0.01 and kept its values)
    "PHRASE_WEIGHT": (0.0, 0.05, 0.1, 0.15),
    "RARE_WEIGHT": (0.0, 0.05, 0.1, 0.15),
    "SUPPORT_RATIO": (0.65, 0.7, 0.75),
}


class MemoEmbedder:
    """The local embedder with every text's vector memoized (queries and sentences)."""

    def __init__(self, base: Any):
        self.base = base
        self.docs: dict[str, np.ndarray] = {}
        self.queries: dict[str, np.ndarray] = {}

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self.queries:
            self.queries[text] = np.asarray(self.base.embed_query(text), dtype=np.float32)
        return self.queries[text]

    def embed_documents(self, texts: Sequence[str], progress: Any = None) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.docs]
        if todo:
            for t, v in zip(todo, np.asarray(self.base.embed_documents(todo)), strict=True):
                self.docs[t] = v.astype(np.float32)
        return np.stack([self.docs[t] for t in texts])


def retrieve_all(articles: Sequence[str], n: int) -> tuple[list[dict], LocalEmbedder]:
    texts = sa.load_articles(articles)
    questions = sa.sample_questions(sa.load_questions(articles), n)
    embedder = LocalEmbedder()
    with tempfile.TemporaryDirectory(prefix="extractive-tuning-") as tmp:
        ws = Workspace(Settings(db_path=str(Path(tmp) / "t.db"), embedder="local",
                                answerer="extractive"))
        ws.__dict__["embedder"] = embedder
        try:
            sa.index_articles(ws, texts)
            for q in questions:
                q["sources"] = ws.sources(ws.search(q["question"]))
        finally:
            ws.close()
    return questions, embedder


def score(questions: list[dict], answerer: Any) -> dict[str, float]:
    hits, leads, chars, words = [], [], [], []
    for q in questions:
        plain = sa.strip_marks(answerer.compose(q["question"], q["sources"], []))
        hits.append(sa.contains_answer(plain, q["answers"]))
        leads.append(sa.contains_answer(sa.first_sentence(plain), q["answers"]))
        chars.append(len(plain))
        words.append(len(plain.split()))
    return {"answer_rate": round(sum(hits) / len(hits), 4),
            "lead_rate": round(sum(leads) / len(leads), 4),
            "mean_answer_chars": round(statistics.mean(chars)),
            "mean_answer_words": round(statistics.mean(words), 1)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=sa.FULL_QUESTIONS)
    args = parser.parse_args(argv)
    questions, embedder = retrieve_all(sa.FULL_ARTICLES, args.questions)
    memo = MemoEmbedder(embedder)
    rows = [{"strategy": "v1", **score(questions, extractive.ExtractiveAnswerer(
        embedder=memo, strategy="v1"))}]
    defaults = {name: getattr(extractive, name) for name in GRID}
    for values in itertools.product(*GRID.values()):
        point = dict(zip(GRID, values))
        for name, value in point.items():
            setattr(extractive, name, value)
        if "DENSE_WEIGHT" in point:
            extractive.LEXICAL_WEIGHT = 1.0 - point["DENSE_WEIGHT"]
        answerer = extractive.ExtractiveAnswerer(embedder=memo, strategy="answer")
        rows.append({"strategy": "answer", **point, **score(questions, answerer)})
    for name, value in defaults.items():
        setattr(extractive, name, value)
    for row in sorted(rows, key=lambda r: (-r["answer_rate"], r["mean_answer_chars"])):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
