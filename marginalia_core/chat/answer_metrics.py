"""Measure answers on a question set with expected answers: answer containment (the expected
answer appears in the answer), first-sentence containment (it appears in the first sentence,
where a reader looks), refusals on questions the library cannot answer, and citation precision /
recall from the answers issue's support check (``chat.support.citation_quality``, ALCE's
metrics), per question and as means.

The answers come from the configured answerer given the passages a retrieval configuration
returns, exactly as Chat would give them (the same sources, numbering and system instruction),
but nothing is saved as a conversation.

Containment compares normalized text (case, punctuation, accents and citation marks aside,
articles dropped), as SQuAD's exact match normalizes. A refusal is an answer that cites no
passage: Chat's "I couldn't find anything…" when nothing passed, or a model's "the documents
don't say".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from marginalia_core.chat.support import citation_quality
from marginalia_core.citations import MARK_RE, renumber_sources
from marginalia_core.providers.answerers.base import Answerer
from marginalia_core.providers.answerers.prompting import (
    NO_SOURCES_ANSWER,
    build_system_instruction,
)

ARTICLES = re.compile(r"\b(a|an|the)\b")
# a sentence ends at . ! ? (closing quotes and citation marks stay with it) before a capital
# or a digit; a line break always ends one
SENTENCE_END = re.compile(r"[.!?…][\"'”’)]*(?:\s*\[[\d\s,;–-]*\])*(?=\s+[\"'“‘(*_]?[A-Z0-9])|\n")
# the figures every answer evaluation reports, in the order the lab and the CLI show them
ANSWER_METRICS = ("answer containment", "first-sentence containment", "refusals (unanswerable)",
                  "citation precision", "citation recall")


@dataclass(frozen=True)
class AnswerCheck:
    question_id: str
    question: str
    expected: str  # "" when none was given
    answerable: bool  # the question has a relevant passage
    answer: str
    sources: int  # passages the answer was given
    refused: bool
    contains: bool | None  # None: no expected answer, or a question with no answer
    first_contains: bool | None
    citation_precision: float | None  # None: a refusal (it cites nothing)
    citation_recall: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def normalize(text: str) -> str:
    """Lower case, accents, punctuation, citation marks and articles away, spaces collapsed."""
    text = unicodedata.normalize("NFKD", MARK_RE.sub(" ", text))
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    text = re.sub(r"[^\w\s]", " ", text)
    return " ".join(ARTICLES.sub(" ", text).split())


def contains(expected: str, answer: str) -> bool:
    """The expected answer, normalized, appears in the answer as whole words."""
    want = normalize(expected)
    return bool(want) and f" {want} " in f" {normalize(answer)} "


def first_sentence(answer: str) -> str:
    text = answer.strip()
    end = SENTENCE_END.search(text)
    return (text[: end.end()] if end else text).strip()


def answer_with(answerer: Answerer, question: str, sources: list[dict[str, Any]]) -> str:
    """What Chat's answerer says to ``question`` given ``sources`` (no history, not saved)."""
    if not sources:
        return NO_SOURCES_ANSWER
    stream = answerer.stream(question, sources, [],
                             system_instruction=build_system_instruction(sources))
    try:
        return "".join(piece for piece in stream if piece)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def check_answer(
    question_id: str, question: str, expected: str, answerable: bool, answer: str,
    sources: list[dict[str, Any]], *, embedder: Any = None,
) -> AnswerCheck:
    """One answer measured against its expected answer and the passages it was given."""
    text, kept, valid, _ = renumber_sources(answer, sources)
    refused = not sources or not valid
    judged = bool(expected.strip()) and answerable
    quality = None if refused else citation_quality(text, kept, embedder)
    return AnswerCheck(
        question_id, question, expected, answerable, text, len(sources), refused,
        contains(expected, text) if judged else None,
        contains(expected, first_sentence(text)) if judged else None,
        None if quality is None else float(quality.precision),
        None if quality is None else float(quality.recall),
    )


def _mean(values: Iterable[float | bool | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def summarize(checks: Sequence[AnswerCheck]) -> dict[str, float | None]:
    """Means over the questions each figure applies to (None: none applies): containment over
    answerable questions with an expected answer, refusals over those the library cannot
    answer, citation figures over the answers that cite."""
    return {
        "answer containment": _mean(c.contains for c in checks),
        "first-sentence containment": _mean(c.first_contains for c in checks),
        "refusals (unanswerable)": _mean(c.refused for c in checks if not c.answerable),
        "citation precision": _mean(c.citation_precision for c in checks),
        "citation recall": _mean(c.citation_recall for c in checks),
    }
