"""The offline answerer: no model service. It picks the sentences of the retrieved passages that
best answer the question and streams them, each followed by its ``[n]``.

Sentences are scored by IDF-weighted word overlap with the question (the words a reader would
look for) blended with the embedder's cosine between sentence and question (paraphrases), plus a
small prior for the passage's own retrieval rank. Deterministic for the same inputs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..prompting import retrieval_query

MAX_SENTENCES = 3  # sentences in an answer
SUPPORT_RATIO = 0.6  # a further sentence must score at least this share of the best one
MAX_CANDIDATES = 60  # sentences scored per question (bounds latency)
LEXICAL_WEIGHT = 0.55
DENSE_WEIGHT = 0.45
RANK_PRIOR = 0.04  # per rank step, favours the passages retrieval ranked higher
MIN_RELEVANCE = 0.12  # below this the sources don't answer the question
MIN_SENTENCE_CHARS = 25
MAX_SENTENCE_CHARS = 600
WORDS_PER_TOKEN = 3

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves tell say says said does according
    document documents source sources text""".split()
)
SENTENCE_RE = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9À-ÖØ-Þ])|\n{2,}")
WORD_RE = re.compile(r"\w+", re.UNICODE)
NOTHING_FOUND = (
    "The passages I found don't seem to answer this directly. The closest one is [1]: “{first}”"
)


def stem(word: str) -> str:
    """A light suffix strip: enough to match 'founded'/'founding', cheap and deterministic."""
    for suffix in ("ingly", "edly", "ing", "ed", "es", "ly", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def terms(text: str) -> list[str]:
    return [stem(w) for w in WORD_RE.findall(text.lower()) if w not in STOPWORDS]


def split_sentences(text: str) -> list[str]:
    parts = (p.strip() for p in SENTENCE_RE.split(" ".join(text.split(" "))))
    out = []
    for p in parts:
        p = " ".join(p.split())
        if len(p) >= MIN_SENTENCE_CHARS:
            out.append(p if len(p) <= MAX_SENTENCE_CHARS else p[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + "…")
    return out


@dataclass
class Candidate:
    text: str
    n: int
    rank: int
    position: int
    score: float = 0.0


class ExtractiveAnswerer:
    name = "extractive"
    model = "extractive"

    def __init__(self, settings: Any = None, embedder: Any = None):
        self.embedder = embedder

    def candidates(self, sources: Sequence[dict[str, Any]]) -> list[Candidate]:
        seen: set[str] = set()
        out: list[Candidate] = []
        for rank, source in enumerate(sources):
            for position, sentence in enumerate(split_sentences(source["content"])):
                key = sentence.lower()
                if key in seen:  # overlapping chunks repeat sentences; keep the better-ranked
                    continue
                seen.add(key)
                out.append(Candidate(sentence, int(source["n"]), rank, position))
        return out[:MAX_CANDIDATES]

    def score(self, query: str, cands: list[Candidate]) -> None:
        q_terms = set(terms(query))
        docs = [set(terms(c.text)) for c in cands]
        n = len(cands)
        idf = {t: math.log(1 + n / (1 + sum(t in d for d in docs))) for t in q_terms}
        total = sum(idf.values()) or 1.0
        lexical = np.array([sum(idf[t] for t in q_terms & d) / total for d in docs])
        dense = np.zeros(n)
        if self.embedder is not None and n:
            qv = self.embedder.embed_query(query)
            sv = self.embedder.embed_documents([c.text for c in cands])
            dense = np.clip(sv @ qv, 0.0, 1.0)
        for i, c in enumerate(cands):
            c.score = float(
                LEXICAL_WEIGHT * lexical[i] + DENSE_WEIGHT * dense[i] - RANK_PRIOR * c.rank
            )

    def compose(self, question: str, sources: Sequence[dict[str, Any]], history: Sequence[dict]) -> str:
        cands = self.candidates(sources)
        if not cands:
            first = " ".join(sources[0]["content"].split())[:200] if sources else ""
            return NOTHING_FOUND.format(first=first)
        self.score(retrieval_query(question, history), cands)
        ranked = sorted(cands, key=lambda c: (-c.score, c.rank, c.position))
        best = ranked[0]
        if best.score < MIN_RELEVANCE:
            return NOTHING_FOUND.format(first=best.text) if best.n == 1 else (
                "The passages I found don't seem to answer this directly. "
                f"The closest is [{best.n}]: “{best.text}”"
            )
        chosen = [best] + [
            c for c in ranked[1:] if c.score >= SUPPORT_RATIO * best.score
        ][: MAX_SENTENCES - 1]
        # read in document order within a source, sources in the order chosen
        order = {c.n: i for i, c in enumerate(chosen)}
        chosen.sort(key=lambda c: (order[c.n], c.position))
        return " ".join(_with_citation(c.text, c.n) for c in chosen)

    def stream(
        self,
        question: str,
        sources: Sequence[dict[str, Any]],
        history: Sequence[dict[str, Any]],
        *,
        system_instruction: str = "",
    ) -> Iterator[str]:
        words = self.compose(question, sources, history).split(" ")
        for i in range(0, len(words), WORDS_PER_TOKEN):
            piece = " ".join(words[i : i + WORDS_PER_TOKEN])
            yield piece if i == 0 else " " + piece


def _with_citation(sentence: str, n: int) -> str:
    """Put the mark before the final punctuation: 'It was founded in 1851 [2].'"""
    m = re.search(r"([.!?…]+[\"')\]]*)$", sentence)
    if m:
        return f"{sentence[: m.start()]} [{n}]{m.group(1)}"
    return f"{sentence} [{n}]"
