"""Is every cited sentence in the passage it cites? A check applied to every answer, whoever
wrote it (the extractive answerer, Gemini, an OpenAI-compatible model).

Marks that point outside the retrieved set are caught by ``citations`` (``invalidCitations``);
this catches the subtler fault, a mark that points to the *wrong* passage. Each sentence of the
answer that carries a mark gets a support score in [0, 1] against the passages its marks cite,
taken together:

- **lexical containment**: the share of its content words (stemmed, stopwords out) that the
  passages have, averaged with the share of its consecutive content-word pairs they have (a
  passage on the same topic shares words, not phrasing), times the share of its numbers they have ("24–10", "1851": a number not in the
  passage is the commonest hallucination, so it weighs on its own);
- **meaning**: when containment alone is inconclusive (between ``DECISIVE_LOW`` and
  ``DECISIVE_HIGH``) and a local embedder is given, the best cosine between the sentence and the
  passages' sentences is blended in (``LEXICAL_SHARE``), so a faithful paraphrase passes;
- **exact quotes**: text quoted in the sentence (“…”, "…", three words or more) must be in the
  passages verbatim (spacing and case aside), else the sentence is unsupported whatever its score.

A sentence is ``supported`` when its score reaches ``SUPPORT_FLOOR``.

Stable API (the chat engine, the retrieval lab and the HTTP API use it)::

    check_support(answer, sources, embedder=None) -> list[SentenceSupport]
    support_score(sentence, passages, embedder=None) -> float      # one sentence, any passages
    citation_quality(answer, sources, embedder=None) -> CitationQuality   # ALCE precision/recall
    SentenceSupport.as_dict() -> {"sentence", "marks", "score", "supported"}

``sources`` are mappings with ``n`` and ``content`` (``excerpt`` as a fallback), numbered as the
answer's marks number them (``meta``'s sources for streamed text, ``done``'s for the final answer).

ALCE's citation metrics (Gao et al., 2023), with this check in place of their NLI model:
citation **recall** is the share of the answer's sentences supported by their cited passages
together (a sentence without a mark counts as unsupported); citation **precision** is the share
of citations that are relevant, where a citation is irrelevant when its sentence is unsupported,
or when (for a sentence with several marks) its passage alone does not support the sentence and
the others suffice without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from marginalia_core.citations import MARK_RE, find_marks
from marginalia_core.providers.answerers.extractive import WORD_RE, split_sentences, terms

SUPPORT_FLOOR = 0.5  # a sentence scoring below this is not found in the passages it cites
DECISIVE_HIGH = 0.85  # containment at or above this (numbers found too) needs no embedding
DECISIVE_LOW = 0.2  # ... and below this no paraphrase rescues it
LEXICAL_SHARE = 0.5  # of the blended score; the cosine gets the rest
PAIR_SHARE = 0.5  # of containment: consecutive word pairs found, against single words
MIN_QUOTE_WORDS = 3  # shorter quoted text ("the 'Mile'") is a term, not a quotation
MAX_PASSAGE_SENTENCES = 40  # embedded per check at most, so a long answer stays cheap
NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")
QUOTE_RE = re.compile(r"[“\"]([^”\"]{3,400})[”\"]")
# a sentence ends at . ! ? (closing quotes, and any marks after it, stay with it) before a
# capital, a digit, an opening quote or Markdown emphasis; a line break always ends one
BOUNDARY_RE = re.compile(
    r"[.!?…][\"'”’)]*(?:\s*\[\s*\d[\d\s,;–-]*\])*(?=\s+[\"'“‘(*_]?[A-Z0-9À-ÖØ-Þ])|\n+"
)
MARKDOWN_RE = re.compile(r"(\*\*|__|`|^\s*(?:[-*•]|\d{1,3}[.)])\s+|^#+\s*)", re.M)


@dataclass(frozen=True)
class SentenceSupport:
    """One marked sentence of an answer (marks left in) and how well its passages hold it."""

    sentence: str
    marks: tuple[int, ...]
    score: float
    supported: bool

    def as_dict(self) -> dict[str, Any]:
        return {"sentence": self.sentence, "marks": list(self.marks),
                "score": round(self.score, 3), "supported": self.supported}


@dataclass(frozen=True)
class CitationQuality:
    """ALCE citation precision and recall of one answer, with the counts behind them."""

    precision: float
    recall: float
    sentences: int  # sentences in the answer
    supported: int  # of them, supported by their cited passages together
    citations: int  # (sentence, mark) pairs
    relevant: int  # of them, relevant


def answer_sentences(answer: str) -> list[tuple[str, tuple[int, ...]]]:
    """The answer's sentences, each with the source numbers its marks cite (in order, unique).
    A mark after the full stop ("… won. [1] Then …") stays with the sentence before it."""
    out: list[tuple[str, tuple[int, ...]]] = []
    start = 0
    for m in BOUNDARY_RE.finditer(answer):
        _add_sentence(out, answer[start : m.end()])
        start = m.end()
    _add_sentence(out, answer[start:])
    return out


def _add_sentence(out: list[tuple[str, tuple[int, ...]]], piece: str) -> None:
    piece = piece.strip()
    if not WORD_RE.search(MARK_RE.sub("", piece)):
        return
    numbers = tuple(dict.fromkeys(n for mark in find_marks(piece) for n in mark.numbers))
    out.append((piece, numbers))


def plain(sentence: str) -> str:
    """The sentence without its marks and Markdown, as it would appear in a passage."""
    text = MARKDOWN_RE.sub("", MARK_RE.sub("", sentence))
    return re.sub(r"\s+([,.;:!?])", r"\1", " ".join(text.split()))


def _normalized(text: str) -> str:
    return " ".join(WORD_RE.findall(text.lower()))


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in NUMBER_RE.findall(text)}


def containment(sentence: str, passage: str) -> float:
    """The share of the sentence's content words the passage has, averaged with the share of
    its pairs of consecutive content words (a passage on the same topic shares the words, not
    the phrasing), times the share of its numbers the passage has."""
    sequence = [t for t in terms(sentence) if not t.isdigit()]
    words = set(sequence)
    numbers = _numbers(sentence)
    passage_terms = [t for t in terms(passage) if not t.isdigit()]
    have = set(passage_terms)
    share = len(words & have) / len(words) if words else 1.0
    pairs = set(zip(sequence, sequence[1:], strict=False))
    if pairs:
        have_pairs = set(zip(passage_terms, passage_terms[1:], strict=False))
        share = (1 - PAIR_SHARE) * share + PAIR_SHARE * len(pairs & have_pairs) / len(pairs)
    if numbers:
        share *= len(numbers & _numbers(passage)) / len(numbers)
    return share


def quotes_found(sentence: str, passage: str) -> bool:
    """Every quotation of ``MIN_QUOTE_WORDS`` words or more in the sentence is in the passage."""
    hay = _normalized(passage)
    for m in QUOTE_RE.finditer(sentence):
        quoted = _normalized(m.group(1).rstrip("…"))
        if len(quoted.split()) >= MIN_QUOTE_WORDS and quoted not in hay:
            return False
    return True


def support_score(sentence: str, passages: Sequence[str], embedder: Any = None) -> float:
    """How well ``passages`` (together) hold ``sentence`` (marks and Markdown are ignored): 0 when
    a quotation in it is not theirs, else containment, blended with the best cosine to one of
    their sentences when containment is inconclusive and an embedder is given."""
    text = plain(sentence)
    joined = "\n\n".join(passages)
    if not text or not joined.strip():
        return 0.0
    if not quotes_found(text, joined):
        return 0.0
    lexical = containment(text, joined)
    if embedder is None or lexical >= DECISIVE_HIGH or lexical < DECISIVE_LOW:
        return lexical
    candidates = [s for p in passages for s in split_sentences(p)][:MAX_PASSAGE_SENTENCES]
    if not candidates:
        return lexical
    vectors = np.asarray(embedder.embed_documents([text, *candidates]), dtype=np.float32)
    cosine = float(np.clip((vectors[1:] @ vectors[0]).max(), 0.0, 1.0))
    return LEXICAL_SHARE * lexical + (1 - LEXICAL_SHARE) * cosine


def _texts(sources: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    return {int(s["n"]): str(s.get("content") or s.get("excerpt") or "") for s in sources}


def check_support(
    answer: str, sources: Sequence[Mapping[str, Any]], embedder: Any = None
) -> list[SentenceSupport]:
    """Every sentence of ``answer`` with a mark, scored against the sources it cites. Marks
    matching no source count as passages with no text (such a sentence is unsupported)."""
    by_n = _texts(sources)
    out = []
    for sentence, marks in answer_sentences(answer):
        if not marks:
            continue
        score = support_score(sentence, [by_n.get(n, "") for n in marks], embedder)
        out.append(SentenceSupport(sentence, marks, score, score >= SUPPORT_FLOOR))
    return out


def citation_quality(
    answer: str, sources: Sequence[Mapping[str, Any]], embedder: Any = None
) -> CitationQuality:
    """ALCE citation precision and recall of ``answer`` (see the module docstring)."""
    by_n = _texts(sources)
    sentences = answer_sentences(answer)
    supported = citations = relevant = 0
    for sentence, marks in sentences:
        if not marks:
            continue
        citations += len(marks)

        def holds(numbers: Sequence[int], sentence: str = sentence) -> bool:
            passages = [by_n.get(n, "") for n in numbers]
            return support_score(sentence, passages, embedder) >= SUPPORT_FLOOR

        if not holds(marks):
            continue
        supported += 1
        relevant += len(marks)
        if len(marks) > 1:
            for n in marks:
                if not holds([n]) and holds([m for m in marks if m != n]):
                    relevant -= 1
    return CitationQuality(
        precision=relevant / citations if citations else 0.0,
        recall=supported / len(sentences) if sentences else 0.0,
        sentences=len(sentences),
        supported=supported,
        citations=citations,
        relevant=relevant,
    )
