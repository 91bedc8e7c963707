"""The learned answer-sentence selector of the offline answerer (issue 22): two linear models in
numpy over the same features of each candidate sentence. A listwise (softmax) logistic model
picks the sentence that leads (trained to put the most weight on a sentence holding the answer,
among the pool's sentences); a pointwise logistic regression gives each sentence an absolute
probability of holding the answer, which decides whether the documents answer at all.

The extractive answerer's "answer" scoring (IDF-weighted term match, neighbours, phrase and
rare-word cues, the local embedder's cosine for the best few) produces each candidate's raw
signals; this model weighs them, and a few more (answer-type fit, position, retrieval rank and
score, length, how far the sentence is from the best of the others on each signal), into a
probability. It was fitted by ``benchmarks/train_answer_selector.py`` on SQuAD v1.1 dev *train*
articles (never the held-out ones the benchmarks report), answerable questions and the same
questions asked against other articles (every sentence a negative there), so the probability is
absolute: when even the best sentence is unlikely to answer, the answerer says the documents do
not, instead of quoting a sentence that merely shares the question's words.

The weights file (``selector_weights.json``, next to this module) holds the feature names, their
standardisation, the coefficients and the calibrated thresholds; the script rebuilds it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS_PATH = Path(__file__).with_name("selector_weights.json")
FEATURES = (
    "lexical", "context", "phrase", "rare", "dense", "lexical_x_dense",
    "lexical_gap", "dense_gap", "context_gap", "best_lexical", "best_dense",
    "type_asked", "type_fit", "novel", "restates", "log_words", "terminal", "pronoun_start",
    "first_in_passage", "position", "rank", "source_score", "top_lexical", "top_dense",
    "question_terms",
)
PRONOUNS = frozenset(("he", "she", "it", "they", "his", "her", "its", "their", "this", "these",
                      "those", "that", "such", "there"))


@dataclass(frozen=True)
class SelectorModel:
    """A fitted selector: standardise, weigh, squash. ``refuse_below``: the best sentence's
    probability under which the answer is "not in your documents"; ``add_ratio`` and
    ``add_min``: a further sentence joins the lead when its probability is at least this share
    of the lead's and at least this much."""

    names: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    refuse_below: float
    add_ratio: float
    add_min: float
    rank_coef: np.ndarray  # the listwise model: which sentence of a pool leads

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """Each sentence's probability of holding the answer (absolute: calibrates refusal)."""
        z = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))

    def ranks(self, x: np.ndarray) -> np.ndarray:
        """Each sentence's score for leading among the others of its pool (higher: better)."""
        return ((x - self.mean) / self.scale) @ self.rank_coef

    def as_json(self, **extra: Any) -> dict[str, Any]:
        return {
            "features": list(self.names),
            "mean": [round(float(v), 6) for v in self.mean],
            "scale": [round(float(v), 6) for v in self.scale],
            "coef": [round(float(v), 6) for v in self.coef],
            "rank_coef": [round(float(v), 6) for v in self.rank_coef],
            "intercept": round(self.intercept, 6),
            "refuse_below": self.refuse_below,
            "add_ratio": self.add_ratio,
            "add_min": self.add_min,
            **extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SelectorModel:
        names = tuple(data["features"])
        if names != FEATURES:
            raise ValueError("selector weights were fitted on other features; rebuild them "
                             "with benchmarks/train_answer_selector.py")
        return cls(
            names=names,
            mean=np.asarray(data["mean"], dtype=np.float64),
            scale=np.asarray(data["scale"], dtype=np.float64),
            coef=np.asarray(data["coef"], dtype=np.float64),
            intercept=float(data["intercept"]),
            refuse_below=float(data["refuse_below"]),
            add_ratio=float(data["add_ratio"]),
            add_min=float(data["add_min"]),
            rank_coef=np.asarray(data["rank_coef"], dtype=np.float64),
        )


@lru_cache(maxsize=1)
def load_model(path: str = str(WEIGHTS_PATH)) -> SelectorModel:
    return SelectorModel.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def features(pool: Sequence[Any], question_terms: int, type_asked: bool) -> np.ndarray:
    """One row per candidate of ``pool`` (extractive ``Candidate``s scored by the "answer"
    strategy and embedded), columns ``FEATURES``."""
    if not pool:
        return np.zeros((0, len(FEATURES)))
    best_lexical = max(c.lexical for c in pool)
    best_dense = max(c.dense for c in pool)
    best_context = max(c.context for c in pool)
    rows = []
    for c in pool:
        words = len(c.text.split())
        first = c.text.split()[0].lower().strip(",") if words else ""
        rows.append((
            c.lexical, c.context, c.phrase, c.rare, c.dense, c.lexical * c.dense,
            best_lexical - c.lexical, best_dense - c.dense, best_context - c.context,
            best_lexical, best_dense,
            float(type_asked), float(c.fits), min(c.novel, 12) / 12, float(c.novel < 2),
            math.log(max(words, 1)), float(c.text.rstrip("\"'”’)]").endswith((".", "!", "?"))),
            float(first in PRONOUNS), float(c.position == 0), min(c.position, 10) / 10,
            c.rank / 5, c.source_score, float(c.lexical == best_lexical),
            float(c.dense == best_dense), math.log(1 + question_terms),
        ))
    return np.asarray(rows, dtype=np.float64)
