"""Measure retrieval on a question set: recall@k, precision@k, MRR@k, nDCG@10, hit@1 and, per
question, the rank of the first relevant passage; sweep the threshold and the fusion weight in
one pass; compare two configurations question by question.

Each question is searched once (``Retriever.candidates``: one embedding, one BM25 query) and
every configuration, threshold or weight re-ranks the same candidates, so a sweep costs no more
embedding than one evaluation.

Ranking units: when all of a question's judgments are whole documents (BEIR), passages collapse
to documents in order of their best passage, as BEIR scores; otherwise each passage is a unit. A
judgment counts once: the first unit that matches it gains its grade, later ones gain nothing
(so nDCG on documents is exactly BEIR's).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from marginalia_core.config import RetrievalConfig
from marginalia_core.retrieval.retriever import Candidates, Hit, Retriever
from marginalia_core.store.question_sets import Judgment, Question, QuestionSet

NDCG_AT = 10
DEPTH = 100  # units ranked per question: the first-relevant rank is reported up to here
THRESHOLD_GRID = tuple(round(-0.1 + 0.025 * i, 3) for i in range(37))  # -0.1 .. 0.8
WEIGHT_GRID = tuple(round(0.1 * i, 1) for i in range(11))  # dense weight 0 .. 1
# A suggestion keeps recall at or above this share of the current setting's (unless the user
# sets a floor of their own); metrics this close count as a tie, and ties go to the current value
RECALL_FLOOR_SHARE = 0.95
TIE = 1e-3
# a PDF passage's location label ("p. 3", "pp. 3–5"): its judgment names pages itself
_PAGE_LABEL = re.compile(r"pp?\. \d")

Progress = Callable[[dict[str, Any]], None]


class Cancelled(Exception):
    """A sweep was cancelled through its cancel flag; partial results are dropped."""


@dataclass(frozen=True)
class EvalConfig(RetrievalConfig):
    """A retrieval configuration as the lab saves and evaluates it: ``RetrievalConfig`` (its
    defaults; threshold and fusion weight ``None`` = the library's setting) plus the embedder
    it was measured with. The passage size is the chunk sweep's; evaluation ranks the library
    as indexed."""

    embedder: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvalConfig:
        """From a saved dict: unknown keys and ``None`` values are left out (defaults)."""
        known = {k: v for k, v in d.items()
                 if k in cls.__dataclass_fields__ and v is not None}
        return cls(**known)


@dataclass(frozen=True)
class QuestionResult:
    question_id: str
    question: str
    first_relevant_rank: int | None  # 1-based unit rank, None if not within DEPTH
    returned: int  # units returned (top k after the threshold)
    relevant_returned: int
    judgments: int
    found: tuple[str, ...]  # labels of judgments found in the top k
    missed: tuple[str, ...]
    recall: float
    precision: float | None  # None when nothing was returned
    reciprocal_rank: float  # within the top k
    ndcg: float
    hit1: bool


@dataclass(frozen=True)
class EvalResult:
    set_name: str
    config: EvalConfig
    threshold: float  # the threshold actually applied
    metrics: dict[str, float]
    questions: list[QuestionResult]

    def to_dict(self) -> dict[str, Any]:
        return {
            "set": self.set_name,
            "config": self.config.to_dict(),
            "threshold": self.threshold,
            "metrics": self.metrics,
            "questions": [asdict(q) for q in self.questions],
        }


@dataclass(frozen=True)
class ThresholdPoint:
    threshold: float
    precision: float
    recall: float
    f1: float
    returned: float  # mean passages returned per question
    answered: float  # share of questions with at least one passage
    empty: tuple[str, ...] = ()  # the questions that get no passage at this threshold


@dataclass(frozen=True)
class ThresholdSweep:
    mode: str
    top_k: int
    current: float
    suggested: float  # the highest threshold keeping recall at or above ``floor``
    points: list[ThresholdPoint]
    best_f1: float | None = None  # the threshold of best F1, whatever it costs in recall
    floor: float = 0.0  # the recall the suggestion keeps

    def at(self, threshold: float) -> ThresholdPoint:
        return min(self.points, key=lambda p: abs(p.threshold - threshold))


@dataclass(frozen=True)
class WeightPoint:
    alpha: float | None
    metrics: dict[str, float]
    empty: tuple[str, ...] = ()  # the questions that get no passage at this weight


@dataclass(frozen=True)
class WeightSweep:
    best: float | None  # the suggested dense weight (best ``key`` keeping recall >= floor)
    points: list[WeightPoint]
    current: float | None = None
    key: str = f"ndcg@{NDCG_AT}"
    floor: float = 0.0

    def at(self, alpha: float | None) -> WeightPoint:
        return next(p for p in self.points if p.alpha == alpha)


@dataclass(frozen=True)
class QuestionDelta:
    question_id: str
    question: str
    rank_a: int | None
    rank_b: int | None
    shift: int | None  # rank_a - rank_b: positive = B ranks the first relevant passage higher
    gained: tuple[str, ...]  # judgments B finds in its top k that A does not
    lost: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    set_name: str
    a: EvalResult
    b: EvalResult
    deltas: list[QuestionDelta]
    better: int = 0  # questions whose first relevant rank improved in B
    worse: int = 0


@dataclass
class Prepared:
    """A question set searched once: candidates and chunk metadata per question."""

    qset: QuestionSet
    candidates: list[Candidates]
    chunks: dict[int, dict[str, Any]] = field(default_factory=dict)


# --- preparing -------------------------------------------------------------------------------


def prepare(
    retriever: Retriever,
    qset: QuestionSet,
    *,
    depth: int = 0,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Prepared:
    """Search every question once (candidates of both lists, both scores)."""
    cands = []
    chunk_ids: set[int] = set()
    total = len(qset.questions)
    for n, q in enumerate(qset.questions, 1):
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        c = retriever.candidates(q.text, limit=depth)
        cands.append(c)
        chunk_ids.update(c.chunk_ids)
        if progress:
            progress({"type": "progress", "stage": "search", "done": n, "total": total})
    return Prepared(qset, cands, retriever.store.chunks_by_ids(sorted(chunk_ids)))


# --- scoring one question --------------------------------------------------------------------


def rank_units(hits: Sequence[Hit], question: Question) -> list[tuple[float, frozenset[int]]]:
    """(cosine of the unit's best passage, indexes of the judgments it matches), best first.
    A unit is a passage, or a document when every judgment is at document level."""
    judged = [(i, j) for i, j in enumerate(question.judgments) if j.grade > 0]
    by_doc = bool(judged) and all(j.level == "document" for _, j in judged)
    out: list[tuple[float, frozenset[int]]] = []
    seen: set[str] = set()
    for hit in hits:
        if by_doc:
            if hit.document_name in seen:
                continue
            seen.add(hit.document_name)
        row = vars(hit)  # the fields a judgment matches on: document, pages, offsets
        out.append((hit.score, frozenset(i for i, j in judged if j.matches(row))))
        if len(out) >= DEPTH:
            break
    return out


def _dcg(gains: Iterable[float]) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def score_question(
    question: Question, units: list[tuple[float, frozenset[int]]], k: int
) -> QuestionResult:
    judged = {i: j for i, j in enumerate(question.judgments) if j.grade > 0}
    first = next((n for n, (_, m) in enumerate(units, 1) if m), None)
    top = units[:k]
    found: set[int] = set()
    for _, m in top:
        found |= m
    credited: set[int] = set()
    gains = []
    for _, m in units[:NDCG_AT]:
        new = m - credited
        gains.append(max((judged[i].grade for i in new), default=0))
        credited |= new
    ideal = _dcg(sorted((j.grade for j in judged.values()), reverse=True)[:NDCG_AT])
    relevant_returned = sum(1 for _, m in top if m)
    return QuestionResult(
        question_id=question.id,
        question=question.text,
        first_relevant_rank=first,
        returned=len(top),
        relevant_returned=relevant_returned,
        judgments=len(judged),
        found=tuple(judged[i].label for i in sorted(found)),
        missed=tuple(judged[i].label for i in sorted(set(judged) - found)),
        recall=len(found) / len(judged) if judged else 0.0,
        precision=relevant_returned / len(top) if top else None,
        reciprocal_rank=1.0 / first if first is not None and first <= k else 0.0,
        ndcg=_dcg(gains) / ideal if ideal > 0 else 0.0,
        hit1=first == 1,
    )


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return float(sum(values) / len(values)) if values else 0.0


def summarize(results: Sequence[QuestionResult], k: int) -> dict[str, float]:
    """Mean metrics over the questions with a relevant passage (one the library cannot
    answer has nothing to find; the answer metrics count its refusals)."""
    count = len(results)
    results = [r for r in results if r.judgments]
    answered = [r for r in results if r.returned]
    return {
        "questions": count,
        f"recall@{k}": _mean(r.recall for r in results),
        f"precision@{k}": _mean(r.precision for r in answered if r.precision is not None),
        f"mrr@{k}": _mean(r.reciprocal_rank for r in results),
        f"ndcg@{NDCG_AT}": _mean(r.ndcg for r in results),
        "hit@1": _mean(float(r.hit1) for r in results),
        "answered": _mean(float(bool(r.returned)) for r in results),
    }


# --- evaluating ------------------------------------------------------------------------------


def evaluate_prepared(
    retriever: Retriever, prepared: Prepared, config: EvalConfig
) -> EvalResult:
    """Metrics of ``config`` on prepared questions: each ranked by ``Retriever.retrieve`` (the
    path Chat takes) past the top k, then scored by unit."""
    threshold = retriever.threshold_of(config)
    results = []
    for q, c in zip(prepared.qset.questions, prepared.candidates, strict=True):
        hits = retriever.retrieve(c, config, top_k=False, passages=prepared.chunks)
        results.append(score_question(q, rank_units(hits, q), config.top_k))
    return EvalResult(
        prepared.qset.name, config, threshold, summarize(results, config.top_k), results
    )


def evaluate(
    retriever: Retriever,
    qset: QuestionSet,
    config: EvalConfig | None = None,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> EvalResult:
    """Metrics for ``qset`` under ``config`` on the retriever's library."""
    config = config or EvalConfig(mode=retriever.settings.retrieval.mode,
                                  top_k=retriever.settings.retrieval.top_k)
    prepared = prepare(retriever, qset, progress=progress, cancel=cancel)
    return evaluate_prepared(retriever, prepared, config)


def recall_floor(current_recall: float, floor: float | None = None) -> float:
    """The recall a suggestion must keep: ``floor`` if the user set one, else
    RECALL_FLOOR_SHARE of the current setting's."""
    return float(floor) if floor is not None else RECALL_FLOOR_SHARE * current_recall


def suggest(
    options: Sequence[tuple[Any, float, float]], current: Any, floor: float
) -> Any:
    """Of ``(value, score, recall)`` options, the value of best score among those keeping
    recall >= ``floor``; scores within TIE of the best tie, and a tie goes to ``current``,
    else to the value nearest it (numbers) or the first. None kept the floor: ``current``."""
    kept = [o for o in options if o[2] >= floor - 1e-9]
    if not kept:
        return current
    best = max(score for _, score, _ in kept)
    tied = [value for value, score, _ in kept if score >= best - TIE]
    if current in tied:
        return current
    if isinstance(current, int | float):
        return min(tied, key=lambda v: abs(v - current))
    return tied[0]


def threshold_sweep(
    retriever: Retriever,
    prepared: Prepared,
    *,
    mode: str | None = None,
    top_k: int | None = None,
    alpha: float | None = None,
    grid: Sequence[float] = THRESHOLD_GRID,
    current: float | None = None,
    floor: float | None = None,
) -> ThresholdSweep:
    """Precision / recall / F1 of the passages returned at each threshold, in one pass: each
    question is ranked once with no threshold, then each threshold only filters.

    Precision = relevant passages returned / passages returned; recall = judgments found /
    judgments (both pooled over the questions). The suggestion is the highest threshold that
    keeps recall at or above ``floor`` (default: RECALL_FLOOR_SHARE of the recall at
    ``current``, Chat's threshold when not given): a stricter threshold only pays while it
    loses nothing that matters. The best-F1 threshold is reported beside it."""
    current = retriever.threshold if current is None else round(float(current), 4)
    config = retriever.config(mode=mode, top_k=top_k, alpha=alpha, threshold=-math.inf)
    mode, top_k = config.mode, config.top_k
    per_q = []
    for q, c in zip(prepared.qset.questions, prepared.candidates, strict=True):
        hits = retriever.retrieve(c, config, top_k=False, passages=prepared.chunks)
        if mode == "hybrid":  # a keyword rescue passes every threshold
            hits = [replace(h, score=math.inf) if h.rescued else h for h in hits]
        per_q.append((q.text, rank_units(hits, q)))
    points = []
    total_judged = sum(sum(1 for j in q.judgments if j.grade > 0) for q in prepared.qset.questions)
    for t in sorted({*grid, current}):
        returned = relevant = found = 0
        empty = []
        for text, units in per_q:
            kept = [m for cosine, m in units if cosine >= t or mode == "lexical"][:top_k]
            returned += len(kept)
            relevant += sum(1 for m in kept if m)
            found += len(frozenset().union(*kept)) if kept else 0
            if not kept:
                empty.append(text)
        p = relevant / returned if returned else 1.0
        r = found / total_judged if total_judged else 0.0
        f1 = 2 * p * r / (p + r) if p + r else 0.0
        n = max(1, len(per_q))
        points.append(ThresholdPoint(float(t), p, r, f1, returned / n,
                                     1 - len(empty) / n, tuple(empty)))
    now = next(p for p in points if p.threshold == current)
    need = recall_floor(now.recall, floor)
    # the highest threshold keeping the floor; equal results tie, and a tie goes to ``current``
    suggested = suggest([(p.threshold, p.threshold, p.recall) for p in points
                         if (p.precision, p.recall, p.returned) != (now.precision, now.recall,
                                                                    now.returned)
                         or p.threshold == current], current, need)
    best = max(points, key=lambda pt: (pt.f1, -abs(pt.threshold - current)))
    return ThresholdSweep(mode, top_k, current, suggested, points, best.threshold, need)


def weight_sweep(
    retriever: Retriever,
    prepared: Prepared,
    base: EvalConfig,
    *,
    grid: Sequence[float] = WEIGHT_GRID,
    key: str = f"ndcg@{NDCG_AT}",
    floor: float | None = None,
) -> WeightSweep:
    """Hybrid metrics at each dense weight of ``grid`` and at ``base``'s own (None: the
    library's). The suggestion is the weight of best ``key`` among those keeping recall@k at
    or above ``floor`` (default: RECALL_FLOOR_SHARE of ``base``'s); a tie goes to ``base``'s
    weight, so a flat curve suggests no change."""
    current = round(retriever.alpha_of(base), 4)
    points = []
    for a in sorted({*(round(float(g), 4) for g in grid), current}):
        result = evaluate_prepared(retriever, prepared, replace(base, mode="hybrid", alpha=a))
        points.append(WeightPoint(a, result.metrics,
                                  tuple(q.question for q in result.questions if not q.returned)))
    recall_key = f"recall@{base.top_k}"
    now = next(p for p in points if p.alpha == current)
    kept = recall_floor(now.metrics[recall_key], floor)
    best = suggest([(p.alpha, p.metrics[key], p.metrics[recall_key]) for p in points],
                   current, kept)
    return WeightSweep(best, points, current, key, kept)


def compare(a: EvalResult, b: EvalResult) -> Comparison:
    """Per question: the first relevant rank under A and B, judgments gained and lost."""
    deltas = []
    better = worse = 0
    for qa, qb in zip(a.questions, b.questions, strict=True):
        ra, rb = qa.first_relevant_rank, qb.first_relevant_rank
        shift = None if ra is None or rb is None else ra - rb
        if (ra is None and rb is not None) or (shift is not None and shift > 0):
            better += 1
        elif (rb is None and ra is not None) or (shift is not None and shift < 0):
            worse += 1
        deltas.append(
            QuestionDelta(
                qa.question_id, qa.question, ra, rb, shift,
                gained=tuple(x for x in qb.found if x not in qa.found),
                lost=tuple(x for x in qa.found if x not in qb.found),
            )
        )
    return Comparison(a.set_name, a, b, deltas, better, worse)


def judgments_for_chunk(row: dict[str, Any], *, by: str = "span") -> Judgment:
    """The judgment the Inspector saves when a passage is ticked: its document and its text
    span (``by="span"``) or its pages (``by="page"``), never its chunk id. A text or Markdown
    file has no pages (it is stored as one page 1): judged by pages, it is the whole document,
    and its span judgment keeps no page, so no table or export names a "p. 1" for it. A slide,
    sheet rows, chapter or section keeps its location's name ("slide 2"), so it is not called
    a page either."""
    # a chunk row names its location ("p. 3", "slide 2"); a text file's has none
    paged = bool(row["location"]) if "location" in row else "mime" not in row
    place = str(row.get("location") or "")
    if _PAGE_LABEL.match(place):
        place = ""  # a PDF's pages: the judgment's own "p. 3–5"
    if by == "page":
        if not paged:
            return Judgment(row["document_name"])
        return Judgment(row["document_name"], int(row["page_start"]), int(row["page_end"]),
                        location=place)
    if not paged:
        return Judgment(
            row["document_name"], None, None, int(row["start"]), int(row["end"]),
            excerpt=" ".join(row["content"].split())[:200],
        )
    return Judgment(
        row["document_name"], int(row["page_start"]), int(row["page_end"]),
        int(row["start"]), int(row["end"]), excerpt=" ".join(row["content"].split())[:200],
        location=place,
    )
