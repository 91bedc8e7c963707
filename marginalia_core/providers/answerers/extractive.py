"""The offline answerer: no model service. It picks the sentences of the retrieved passages that
best answer the question and streams them, each followed by its ``[n]``.

1. **Clean the passages into candidate sentences.** Lines that are page furniture are dropped
   (running headers such as "52 THE SIEGE OF VICKSBURG.", page numbers, ALL-CAPS headings,
   Markdown headings, rules); soft-wrapped lines are joined (OCR hyphenation "conceiva-\\nble"
   undone), also across a page break that cuts a sentence; list items stay separate. The text is
   split into sentences and the ones that carry no statement are dropped: too short, Title-Case
   captions, and the fragment a chunk starts with when its window begins mid-sentence. Bracketed
   numbers copied from a document ("[12]", "cite [99]") are removed, so a passage can never
   put a citation mark of its own into the answer.
2. **Score cheaply, then embed a bounded few.** Every candidate gets an IDF-weighted overlap with
   the question's words (light stemming), an informativeness factor (a sentence that only
   restates the question, a fragment or a run-on scores lower; for "when / how many / who"
   questions, one without a date / number / new name too), a small prior for its passage's
   retrieval rank and, in the default "answer" strategy, two cues of the sentence the question
   was written from: the share of the question's word pairs it repeats ("slow its descent")
   and whether it has the question's rarest word. Only the best ``MAX_EMBEDDED`` are embedded with the local embedder and
   rescored with their cosine to the question, which catches paraphrases: that bounds the
   answer's latency whatever the passages hold (12 sentences ≈ 35 ms on 2 idle cores, ~0.3 s
   when they are busy; a whole ask, retrieval and saving included, p50 ≈ 65 ms on SQuAD).
3. **Compose.** The best sentence leads; up to two more follow, in document order, when they
   score close to it and add something (near-duplicates from overlapping chunks, and sentences
   already said earlier in the conversation, are skipped). A leading sentence that opens with a
   pronoun ("He …") brings the sentence before it for context. When nothing scores
   ``MIN_RELEVANCE`` it says so, and quotes the closest sentence with its mark.

**The "learned" strategy (the default, issue 22)** keeps steps 1 and 2 as signals and lets a
logistic regression fitted on SQuAD train articles (``selector.py``, weights in
``selector_weights.json``, rebuilt by benchmarks/train_answer_selector.py) weigh them into each
embedded sentence's probability of holding the answer. The likeliest leads; another joins only
when its probability is close enough (``add_ratio``, ``add_min``); when even the best is below
the calibrated ``refuse_below`` the answer is "not in your documents", naming the closest
passage. **Say the answer first**: when the question asks for a date, number or name and the lead
sentence holds exactly one of that kind that the question does not, the answer opens with it in
bold, copied verbatim ("**1851** — The mill was built in 1851 … [1].", ``answer_span``).
``"answer"`` (hand-weighted, issue 11) and ``"v1"`` stay callable for the benchmarks.

Deterministic: the same inputs give the same answer (ties break on source rank and position).
The constants were tuned on SQuAD v1.1 dev articles (benchmarks/squad_answers.py).
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marginalia_core.citations import MARK_RE
from marginalia_core.markdown import TABLE_ROW_RE, TABLE_RULE_RE, table_cells
from marginalia_core.providers.answerers import selector
from marginalia_core.providers.answerers.prompting import (
    NO_SOURCES_ANSWER,
    TOPIC_STOPWORDS,
    rewrite_follow_up,
)

MAX_SENTENCES = 3  # sentences in an answer
MAX_ANSWER_CHARS = 900  # soft bound on the whole answer (the first sentence always goes in)
SUPPORT_RATIO = 0.7  # a further sentence must score at least this share of the best one
MAX_CANDIDATES = 120  # sentences scored lexically per question
MAX_EMBEDDED = 12  # of those, the best few embedded: this bounds the answer's latency
LEXICAL_WEIGHT = 0.5
DENSE_WEIGHT = 0.5
RANK_PRIOR = 0.015  # per rank step, favours the passages retrieval ranked higher
REDUNDANCY = 0.8  # a further sentence this similar (cosine) to a chosen one adds nothing
MIN_RELEVANCE = 0.3  # below this the sources do not answer it (calibrated with MiniLM, SQuAD)
TYPE_FIT = 1.0  # a sentence with the kind of answer the question asks for (a date for "when")
TYPE_MISS = 0.75  # ... and one without it
MIN_WORDS = 6
MIN_SENTENCE_CHARS = 30
LONG_WORDS = 60  # longer "sentences" are usually run-ons (tables, OCR columns): penalized
MAX_SENTENCE_CHARS = 500
WORDS_PER_TOKEN = 3
# The "answer" strategy (the default; "v1" is the selector before issue 11, kept callable so
# benchmarks/squad_answers.py measures both in one run). Tuned on SQuAD dev train articles.
STRATEGIES = ("learned", "answer", "v1")
DEFAULT_STRATEGY = "learned"  # issue 22: the "answer" signals weighed by a fitted model (selector)
NEIGHBOUR_WEIGHT = 0.15  # share of a neighbouring sentence's term match a sentence inherits
PARTIAL_MATCH = 0.75  # credit for a compound containing a question term ("sunlight" ~ "light")
MIN_PARTIAL_CHARS = 4
CONTINUATION_RATIO = 0.2  # a lead's continuation ("He claimed …") joins it above this share
TOPIC_WEIGHT = 0.5  # a follow-up's carried topic words, together, weigh this share of its own
SUBJECT_TERMS = 2  # a follow-up's meaning keeps this many of the topic's most shared words
SUBJECT_MIN_DF = 3  # ... each in at least this many candidate sentences
EXTRA_EMBEDDED = 6  # neighbours of the best few, embedded besides the MAX_EMBEDDED
# Sentence vectors remembered across questions (the least recently used forgotten first): the
# questions of a conversation come back to the same passages, and embedding their sentences is
# most of the time before the first word (SQuAD Geology, 20 questions: 138 of 151 ms p50).
# 4,096 x 384 floats: 6 MB.
SENTENCE_MEMORY = 4096
# Added to the "answer" score (tuned on the SQuAD train articles, benchmarks/extractive_tuning.py):
# a sentence that repeats the question's phrasing ("slow its descent") or has its rarest word
# (the one name the passages seldom use) is the one the question was asked about
PHRASE_WEIGHT = 0.1  # x the share of the question's word pairs (bigrams) the sentence has
RARE_WEIGHT = 0.1  # x the IDF of its rarest question word matched, over the rarest asked
CUE_MIN_TERMS = 2  # the cues need this many question words: with one they repeat its match


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


PRONOUN_STARTS = _wordset(
    "he she it they his her its their this these those that such there however but"
)
WORD_RE = re.compile(r"\w+", re.UNICODE)
# a question holding one of these leans on an earlier sentence for whom or what it asks about
QUESTION_PRONOUNS = _wordset("he him she it they them")  # not "his": "Marin … his fort"
# a sentence ends at . ! ? (optionally closed by quotes/brackets) before whitespace and a capital,
# digit or opening quote; abbreviations such as "e.g." or "Mr." are protected below
SENTENCE_END_RE = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9À-ÖØ-Þ])")
ABBREVIATIONS = _wordset(
    "mr mrs ms dr prof st mt jr sr vs etc e.g i.e no fig gen col capt lt sgt rev gov sen rep "
    "inc ltd co corp jan feb mar apr jun jul aug sep sept oct nov dec u.s u.k a.m p.m ca c "
    "al cf approx eq eqs ref refs vol pp"  # papers: "Suganuma et al. (18) described …"
)
BULLET_RE = re.compile(r"^\s*(?:[-*•·▪‣]|\d{1,3}[.)]|[a-z][.)])\s+")
# a Markdown block quote's markers ("> ", "> > "); not "> 50 patients", a comparison
QUOTE_MARK_RE = re.compile(r"^(?:>\s?)+(?=[^\W\d]|[\"'“‘*_(\[]|$)")
PAGE_NUMBER_RE = re.compile(
    r"^[\W_]*(?:page\s+)?(?:\d{1,4}|[ivxlcdm]{1,7})(?:\s*(?:of|/)\s*\d{1,4})?[\W_]*$", re.I
)
TERMINAL_RE = re.compile(r"[.!?…][\"'”’)\]]*$")
MONTHS = (  # not "may": the verb is far more common
    "january|february|march|april|june|july|august|september|october|november|december|"
    "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
ANSWER_TYPES = (  # (question pattern, what a sentence answering it contains)
    (
        re.compile(r"^\s*(when\b|(in |by |since |until )?what (year|date|decade|century|month|day|time)\b"
                   r"|what year|which (year|century|decade))", re.I),
        re.compile(rf"\b(1\d{{3}}|20\d{{2}}|\d{{1,2}}(st|nd|rd|th)|{MONTHS}|centur(y|ies)|decades?|"
                   r"years? (ago|later|earlier)|BC|AD|BCE|CE)\b", re.I),
    ),
    (
        re.compile(r"^\s*(how (many|much|long|old|far|large|big|high|tall|deep|heavy|fast|often)|"
                   r"(what|which) (is the )?(number|percentage|percent|amount|size|population|"
                   r"length|distance|cost|price|temperature))\b", re.I),
        re.compile(r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
                   r"twenty|thirty|forty|fifty|hundred|thousand|million|billion|dozen|half|"
                   r"several|few)\b", re.I),
    ),
)
NAME_QUESTION_RE = re.compile(r"^\s*(who|whom|whose|where|(what|which) (person|man|woman|"
                              r"city|country|place|town|region|company|team))\b", re.I)
# "say the answer first": the spans a lead sentence may open with, in bold, by question kind
_MONTH_NAMES = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
)
DATE_SPAN_RE = re.compile(
    rf"\b(?:(?:{_MONTH_NAMES})\s+\d{{1,2}},?\s+\d{{3,4}}|\d{{1,2}}\s+(?:{_MONTH_NAMES})\s+\d{{3,4}}"
    rf"|(?:{_MONTH_NAMES})\s+\d{{4}}|\d{{1,2}}(?:st|nd|rd|th)[ -]century|\d{{3,4}}s?(?:\s?(?:BC|AD|BCE|CE))?)\b"
)
NUMBER_SPAN_RE = re.compile(
    r"(?<![\w.,])\$?\d[\d,.]*\d?(?:\s?%|\s(?:percent|per cent|million|billion|trillion|thousand|hundred))?"
)
NAME_SPAN_RE = re.compile(
    r"[A-ZÀ-ÖØ-Þ][\w'’.-]*(?:\s+(?:(?:of|de|da|del|von|van|der|la|le|du)\s+)?[A-ZÀ-ÖØ-Þ][\w'’.-]*)*"
)
NOT_NAMES = frozenset((_MONTH_NAMES + "|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday")
                      .lower().split("|"))
OPENING_RE = re.compile(r"^\*\*[^*\n]{1,80}\*\* — ")
YEAR_RE = re.compile(r"1\d{3}|20\d{2}")
MAX_SPAN_WORDS = 6
NOTHING_FOUND = (
    "The passages I found don't seem to answer this directly. The closest is [{n}]: “{text}”"
)


def is_refusal(answer: str) -> bool:
    """The answer says the documents searched do not answer the question (this answerer's
    "not in your documents", or the engine's "nothing matched")."""
    return answer.startswith(NOTHING_FOUND.split(" The closest")[0]) or answer == NO_SOURCES_ANSWER


# --------------------------------------------------------------------------- text helpers
def stem(word: str) -> str:
    """A light suffix strip: enough to match 'graduate'/'graduated', 'finances'/'financed',
    'studies'/'study'; cheap and deterministic."""
    for suffix, repl in (("ingly", ""), ("edly", ""), ("ings", ""), ("ing", ""), ("ies", "y"),
                         ("ied", "y"), ("ed", ""), ("es", ""), ("ly", ""), ("s", "")):
        if len(word) > len(suffix) + 3 and word.endswith(suffix) and not word.endswith("ss"):
            word = word[: -len(suffix)] + repl
            break
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def terms(text: str) -> list[str]:
    return [stem(w) for w in WORD_RE.findall(text.lower()) if w not in TOPIC_STOPWORDS]


def _letters(text: str) -> str:
    return "".join(ch for ch in text if ch.isalpha())


def is_furniture(line: str) -> bool:
    """A line that is layout, not prose: page numbers, running headers, ALL-CAPS headings,
    Markdown headings and rules."""
    s = line.strip()
    if not s:
        return True
    if s.startswith("#") or PAGE_NUMBER_RE.match(s):
        return True
    letters = _letters(s)
    if len(letters) < 2:  # "—4", "* * *", "-----"
        return True
    upper = sum(ch.isupper() for ch in letters)
    return upper / len(letters) >= 0.8 and len(s.split()) <= 14 and len(letters) >= 4


def is_heading(line: str) -> bool:
    """A short Title-Case line without end punctuation: "History of the Mill", "**Results**"."""
    words = line.split()
    if len(words) > 10 or TERMINAL_RE.search(line.rstrip("*_ ")) or line[-1] in ",;:-–—":
        return False
    long_words = [w for w in words if len(_letters(w)) >= 4]
    if not long_words:
        return False
    capitalized = sum(_letters(w)[:1].isupper() for w in long_words)
    return capitalized / len(long_words) >= 0.67


def _join(left: str, right: str) -> str:
    """Join a soft-wrapped line to the text before it, undoing end-of-line hyphenation."""
    if not left:
        return right
    if left.endswith("-") and right[:1].islower() and left[-2:-1].isalpha():
        return left[:-1] + right
    return f"{left} {right}"


def _cells(row: str) -> list[str]:
    return [" ".join(c.replace("\\|", "|").split()) for c in table_cells(row)]


def row_statement(header: list[str], cells: list[str]) -> str:
    """A table row as a sentence that names its columns ("Category 2 — Series 1: 2.5; Series
    2: 4.4."), so a question about a cell finds, and an answer quotes, that row; "" for an
    empty row."""
    pairs = [f"{h}: {c}" if h else c for h, c in zip(header[1:], cells[1:], strict=False) if c]
    lead = cells[0] if cells else ""
    if not pairs:
        return f"{lead}." if lead else ""
    return f"{lead} — {'; '.join(pairs)}." if lead else f"{'; '.join(pairs)}."


def units(text: str) -> list[str]:
    """The passage as prose units (paragraphs, list items) with page furniture removed.

    A blank line ends a unit, unless the unit is unfinished (no end punctuation) and the next
    prose line continues it in lowercase: a sentence cut by a page break or a header. A short
    Title-Case line where a new paragraph could start is a heading, and dropped."""
    out: list[str] = []
    current = ""
    broken = False  # a blank or furniture line since the last prose line
    header: list[str] | None = None  # the header of the Markdown table we are in
    first: list[str] | None = None  # its first row: the header if the rule follows
    for raw in text.splitlines():
        line = QUOTE_MARK_RE.sub("", " ".join(raw.split())).strip()
        if TABLE_ROW_RE.match(line):  # each row a unit of its own, naming its columns
            if current:
                out.append(current)
            current, broken = "", True
            cells = _cells(line) if not TABLE_RULE_RE.match(line) else None
            if cells is None:  # the rule: the row above it is the header
                header, first = first or header, None
            elif header is not None:
                out.append(row_statement(header, cells))
            elif first is None:
                first = cells  # the header, if the rule follows
            else:  # no rule under it: a passage that starts mid-table, no header known
                header = [""] * max(len(first), len(cells))
                out += [row_statement(header, first), row_statement(header, cells)]
                first = None
            continue
        if first is not None:
            out.append(row_statement([""] * len(first), first))
        header = first = None
        at_break = broken or not current or bool(TERMINAL_RE.search(current))
        if not line or is_furniture(line) or (at_break and is_heading(line)):
            broken = True
            continue
        bullet = BULLET_RE.match(line)
        continues = current and not TERMINAL_RE.search(current) and line[:1].islower()
        if bullet or (broken and not continues):
            if current:
                out.append(current)
            current = line[bullet.end() :] if bullet else line
        else:
            current = _join(current, line)
        broken = False
    if first is not None:
        out.append(row_statement([""] * len(first), first))
    if current:
        out.append(current)
    return [u for u in out if u]


# Wikipedia-style page references after a word or punctuation ("City:57–60 where", "1873.:33");
# not after a digit, so "10:30" and "John 3:16" stay
PAGE_REF_RE = re.compile(r"(?<=[^\W\d_]|[.,;!?\"”)]):\d{1,4}(?:[,–-]\d{1,4})*(?=\s|$)")


def _split_unit(unit: str) -> list[str]:
    unit = PAGE_REF_RE.sub("", unit)  # Wikipedia page references: "… in 1873.:33 He …"
    pieces: list[str] = []
    start = 0
    for m in SENTENCE_END_RE.finditer(unit):
        before = unit[start : m.start()]
        last = before.rsplit(None, 1)[-1].lower().rstrip(".") if before.strip() else ""
        if last in ABBREVIATIONS or (len(last) == 1 and last.isalpha()):
            continue  # "Dr. Smith", "J. R. R. Tolkien"
        pieces.append(unit[start : m.start()].strip())
        start = m.end()
    pieces.append(unit[start:].strip())
    return [p for p in pieces if p]


def clean_sentence(sentence: str) -> str:
    """Remove bracketed citation-like numbers copied from the document, tidy spacing, bound
    the length (cut at a clause or word boundary)."""
    s = MARK_RE.sub("", sentence)
    s = re.sub(r"\[\s*(?:citation needed|clarification needed|\d+)\s*\]", "", s, flags=re.I)
    s = re.sub(r"\s+([,.;:!?])", r"\1", " ".join(s.split()))
    if len(s) > MAX_SENTENCE_CHARS:
        head = s[:MAX_SENTENCE_CHARS]
        cut = max(head.rfind("; "), head.rfind(", "))
        if cut < MAX_SENTENCE_CHARS // 2:
            cut = head.rfind(" ")
        s = head[:cut].rstrip(",;: ") + "…"
    return s


def split_sentences(text: str) -> list[str]:
    """Clean sentences of a passage (page furniture dropped), in order; short pieces dropped."""
    out = []
    for unit in units(text):
        for piece in _split_unit(unit):
            s = clean_sentence(piece)
            if len(s) >= MIN_SENTENCE_CHARS:
                out.append(s)
    return out


def looks_like_statement(sentence: str) -> bool:
    """Enough words, not a Title-Case caption or heading."""
    words = sentence.split()
    if len(words) < MIN_WORDS or len(sentence) < MIN_SENTENCE_CHARS:
        return False
    if len(words) <= 12:
        capitalized = sum(w[:1].isupper() for w in words if _letters(w))
        if capitalized / len(words) >= 0.6 and not TERMINAL_RE.search(sentence):
            return False  # "Solid Shot Strapped on a Sabot", "Results and Discussion"
        if capitalized / len(words) >= 0.75:
            return False
    return True


def _normalized(text: str) -> str:
    return " ".join(WORD_RE.findall(text.lower()))


# --------------------------------------------------------------------------- candidates
@dataclass(eq=False)  # identity, not field-by-field (it holds a vector)
class Candidate:
    text: str
    n: int
    rank: int
    position: int
    terms: frozenset[str] = field(default_factory=frozenset)
    quality: float = 1.0
    lexical: float = 0.0
    dense: float = 0.0
    score: float = 0.0
    previous: Candidate | None = None  # the sentence before it in its passage
    next: Candidate | None = None  # the sentence after it
    context: float = 0.0  # the better term match of its neighbours
    cue: float = 0.0  # phrase and rare-word match with the question ("answer" strategy)
    vector: np.ndarray | None = None  # its embedding, when it was embedded
    phrase: float = 0.0  # share of the question's word pairs it repeats
    rare: float = 0.0  # IDF of its rarest question word, over the rarest asked
    fits: bool = False  # has the kind of answer the question asks for (when one is asked)
    novel: int = 0  # its content words that are not the question's
    source_score: float = 0.0  # its passage's retrieval score


def expected_answer(question: str) -> Any:
    """For questions that announce what kind of answer they want (when, how many, who, where),
    a test of whether a sentence has something of that kind; else None."""
    for asks, has in ANSWER_TYPES:
        if asks.search(question):
            return lambda c, q_terms: bool(has.search(c.text))
    if NAME_QUESTION_RE.search(question):

        def has_new_name(c: Candidate, q_terms: set[str]) -> bool:
            words = WORD_RE.findall(c.text)[1:]  # not the sentence's first word
            return any(w[:1].isupper() and stem(w.lower()) not in q_terms for w in words)

        return has_new_name
    return None


def answer_kind(question: str) -> str | None:
    """What a question asks for when it is a short fact: "date", "number", "name" (who, where,
    which person / place / team …), else None."""
    (date_q, _), (number_q, _) = ANSWER_TYPES
    if date_q.search(question):
        return "date"
    if number_q.search(question):
        return "number"
    if NAME_QUESTION_RE.search(question):
        return "name"
    return None


def answer_span(question: str, sentence: str) -> str | None:
    """The one date, number or name of the kind the question asks for that ``sentence`` holds
    and the question does not, copied verbatim from it; None when there are none or several."""
    kind = answer_kind(question)
    if kind is None:
        return None
    asked = set(terms(question))
    asked_text = _normalized(question)
    spans: list[str] = []
    if kind == "date":
        spans = [m.group(0) for m in DATE_SPAN_RE.finditer(sentence)]
    elif kind == "number":
        spans = [m.group(0).rstrip(".,") for m in NUMBER_SPAN_RE.finditer(sentence)]
        spans = [s for s in spans if not YEAR_RE.fullmatch(s)]  # "in 1851": a date, not a count
    else:
        for m in NAME_SPAN_RE.finditer(sentence):
            words = m.group(0).rstrip(".’'").split()
            while words and (words[0].lower() in TOPIC_STOPWORDS or words[0].lower() in NOT_NAMES):
                words = words[1:]  # "The Broncos", "In Paris", "March 1851": not the name
            if words and all(stem(w.lower().strip("'’")) in asked for w in words):
                continue  # the question's own name
            if words and not words[-1][:1].isupper():
                continue
            if words:
                spans.append(" ".join(words))
    spans = [s for s in dict.fromkeys(spans) if s and f" {_normalized(s)} " not in
             f" {asked_text} " and len(s.split()) <= MAX_SPAN_WORDS]
    if len(spans) != 1 or spans[0] not in sentence:
        return None
    return spans[0]


def _quality(c: Candidate, query_terms: set[str], expect: Any = None) -> float:
    """Informativeness in (0, 1]: full sentences that add something beyond the question (and,
    when the question says what it wants, a date, number or name of that kind)."""
    words = len(c.text.split())
    q = 1.0
    if expect is not None:
        q *= TYPE_FIT if expect(c, query_terms) else TYPE_MISS
    if not TERMINAL_RE.search(c.text):
        q *= 0.8  # cut by the end of a chunk, a list item or a caption
    if words < 9 or words > LONG_WORDS:
        q *= 0.85  # a bare clause, or a run-on
    novel = len(c.terms - query_terms)
    if novel < 2:
        q *= 0.5  # restates the question: "THE SIEGE OF VICKSBURG", "Vicksburg was besieged."
    elif novel < 4:
        q *= 0.85
    return q


class ExtractiveAnswerer:
    name = "extractive"
    model = "extractive"

    def __init__(
        self, settings: Any = None, embedder: Any = None, strategy: str = DEFAULT_STRATEGY
    ):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown extractive strategy {strategy!r}; one of {STRATEGIES}")
        self.embedder = embedder
        self.strategy = strategy
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._vectors_lock = threading.Lock()  # answers may run on several threads at once

    def _sentence_vectors(self, texts: list[str]) -> np.ndarray:
        """``embed_documents`` of ``texts``, the ones seen lately taken from memory."""
        if not texts:  # what the embedder gives for nothing (its width, no rows)
            return np.asarray(self.embedder.embed_documents([]), dtype=np.float32)
        with self._vectors_lock:
            known = {t: self._vectors[t] for t in texts if t in self._vectors}
            for t in known:
                self._vectors.move_to_end(t)
        new = list(dict.fromkeys(t for t in texts if t not in known))
        if new:
            fresh = np.asarray(self.embedder.embed_documents(new), dtype=np.float32)
            with self._vectors_lock:
                for t, v in zip(new, fresh, strict=True):
                    known[t] = self._vectors[t] = v
                while len(self._vectors) > SENTENCE_MEMORY:
                    self._vectors.popitem(last=False)
        return np.stack([known[t] for t in texts])

    # -- step 1
    def candidates(self, sources: Sequence[dict[str, Any]]) -> list[Candidate]:
        seen: dict[str, Candidate] = {}
        out: list[Candidate] = []
        for rank, source in enumerate(sources):
            n = int(source["n"])
            content = source.get("content") or source.get("excerpt") or ""
            previous: Candidate | None = None
            # a chunk after a document's first starts OVERLAP characters back, at a word
            # boundary: mid-sentence nearly always (93% of SQuAD chunks), even when the word is
            # capitalized ("Museum of Archaeology and …"); the full sentence is in chunk idx-1
            mid_sentence = int(source.get("idx") or 0) > 0
            sentences = split_sentences(content)
            if self.strategy != "v1" and sentences and _cut_at_end(content, sentences[-1]):
                sentences.pop()  # the window ends mid-sentence: "… showed no speedup on"
            for position, sentence in enumerate(sentences):
                if position == 0 and (mid_sentence or not sentence[:1].isalnum()
                                      or sentence[:1].islower()):
                    continue  # the window starts mid-sentence: "of news from those …"
                if not looks_like_statement(sentence):
                    previous = None
                    continue
                key = _normalized(sentence)
                if key in seen:  # overlapping chunks repeat sentences; keep the better-ranked
                    # ("learned": the next sentence still knows what came before it)
                    previous = seen[key] if self.strategy == "learned" else None
                    continue
                cand = Candidate(
                    sentence, n, rank, position, frozenset(terms(sentence)), previous=previous,
                    source_score=float(source.get("score") or 0.0),
                )
                seen[key] = cand
                if previous is not None and previous.next is None:
                    previous.next = cand
                out.append(cand)
                previous = cand
        return out[:MAX_CANDIDATES]

    # -- step 2
    def score(
        self,
        query: str,
        cands: list[Candidate],
        question: str | None = None,
        topic: Sequence[str] = (),
    ) -> None:
        if not cands:
            return
        if self.strategy != "v1":  # "learned" weighs the signals "answer" computes
            return self._score_answer(query, cands, question or query, topic)
        q_terms = set(terms(query))
        expect = expected_answer(query if question is None else question)
        n = len(cands)
        df = {t: sum(t in c.terms for c in cands) for t in q_terms}
        idf = {t: math.log(1 + n / (1 + df[t])) for t in q_terms}
        total = sum(idf.values()) or 1.0
        for c in cands:
            c.quality = _quality(c, q_terms, expect)
            c.lexical = sum(idf[t] for t in q_terms & c.terms) / total
        for c in cands:
            c.score = c.quality * c.lexical - RANK_PRIOR * c.rank
        if self.embedder is None:
            return
        # only the most promising few are embedded; the rest keep their (lower) lexical score
        pool = sorted(cands, key=lambda c: (-c.score, c.rank, c.position))
        pool = pool[:MAX_EMBEDDED]
        qv = np.asarray(self.embedder.embed_query(query), dtype=np.float32)
        sv = self._sentence_vectors([c.text for c in pool])
        dense = np.clip(sv @ qv, 0.0, 1.0)
        for c, d, vec in zip(pool, dense, sv, strict=True):
            c.dense = float(d)
            c.vector = vec
            c.score = (
                c.quality * (LEXICAL_WEIGHT * c.lexical + DENSE_WEIGHT * c.dense)
                - RANK_PRIOR * c.rank
            )
        embedded = {id(c) for c in pool}
        for c in cands:
            if id(c) not in embedded:  # never outranks an embedded one it lost to lexically
                c.score = c.quality * LEXICAL_WEIGHT * c.lexical - RANK_PRIOR * c.rank

    def _score_answer(
        self, query: str, cands: list[Candidate], question: str, topic: Sequence[str]
    ) -> None:
        """How well each sentence answers: the question's terms it covers (IDF-weighted, a
        follow-up's carried topic words counting ``TOPIC_WEIGHT``), a share of its neighbours'
        match (the sentence after "Fermat wrote a note in the margin" says what the note
        claimed), its meaning (cosine to the question, for the best few and their
        neighbours), its informativeness and its passage's rank."""
        weight = {t: 1.0 for t in terms(question)}
        own = len(weight)
        carried = [t for t in dict.fromkeys(terms(" ".join(topic))) if t not in weight]
        for t in carried:  # together they weigh TOPIC_WEIGHT of the follow-up's own words
            weight[t] = TOPIC_WEIGHT * max(1, own) / len(carried)
        expect = expected_answer(question)
        n = len(cands)
        df = {t: sum(t in c.terms for c in cands) for t in weight}
        idf = {t: weight[t] * math.log(1 + n / (1 + df[t])) for t in weight}
        total = sum(idf.values()) or 1.0
        q_terms = set(weight)
        for c in cands:
            c.quality = _quality(c, q_terms, expect)
            c.fits = expect is not None and bool(expect(c, q_terms))
            c.novel = len(c.terms - q_terms)
            c.lexical = sum(
                idf[t] * _match(t, c.terms) for t in weight
            ) / total
        asked = terms(question)
        cued = len(set(asked)) >= CUE_MIN_TERMS  # "and what about light?": no cue
        pairs = _bigrams(asked)
        rarest = max((idf[t] for t in asked), default=0.0) or 1.0
        for c in cands:
            near = [x.lexical for x in (c.previous, c.next) if x is not None]
            c.context = max(near, default=0.0)
            if cued:
                c.phrase = len(pairs & _bigrams(terms(c.text))) / len(pairs) if pairs else 0.0
                rare = max((idf[t] for t in q_terms & c.terms if weight[t] == 1.0), default=0.0)
                c.rare = rare / rarest
                c.cue = PHRASE_WEIGHT * c.phrase + RARE_WEIGHT * c.rare
            c.score = (c.quality * (c.lexical + NEIGHBOUR_WEIGHT * c.context) + c.cue
                       - RANK_PRIOR * c.rank)
        if self.embedder is None:
            return
        pool = sorted(cands, key=lambda c: (-c.score, c.rank, c.position))[:MAX_EMBEDDED]
        extra: list[Candidate] = []
        for c in pool[:3]:  # a continuation may share no word with the question
            for x in (c.next, c.previous):
                if x is not None and x not in pool and x not in extra:
                    extra.append(x)
        pool += extra[:EXTRA_EMBEDDED]
        dense_text = _follow_up_meaning(question, topic, own, df)
        qv = np.asarray(self.embedder.embed_query(dense_text), dtype=np.float32)
        sv = self._sentence_vectors([c.text for c in pool])
        dense = np.clip(sv @ qv, 0.0, 1.0)
        for c, d, vec in zip(pool, dense, sv, strict=True):
            c.dense = float(d)
            c.vector = vec
        embedded = {id(c) for c in pool}
        for c in cands:
            lexical = LEXICAL_WEIGHT * (c.lexical + NEIGHBOUR_WEIGHT * c.context)
            dense_part = DENSE_WEIGHT * c.dense if id(c) in embedded else 0.0
            c.score = c.quality * (lexical + dense_part) + c.cue - RANK_PRIOR * c.rank

    # -- step 3
    def choose(self, ranked: list[Candidate], said: set[str]) -> list[Candidate]:
        fresh = [c for c in ranked if _normalized(c.text) not in said] or ranked
        best = fresh[0]
        chosen = [best]
        length = len(best.text)
        for c in fresh[1:]:
            if len(chosen) >= MAX_SENTENCES or c.score < SUPPORT_RATIO * best.score:
                break
            if length + len(c.text) > MAX_ANSWER_CHARS:
                continue
            if any(_redundant(c, other) for other in chosen):
                continue
            chosen.append(c)
            length += len(c.text)
        return chosen

    def compose(
        self,
        question: str,
        sources: Sequence[dict[str, Any]],
        history: Sequence[dict[str, Any]] = (),
    ) -> str:
        cands = self.candidates(sources)
        if not cands:
            if not sources:
                return "I have no passages to answer from."
            first = " ".join(
                (sources[0].get("content") or sources[0].get("excerpt") or "").split()
            )
            return NOTHING_FOUND.format(n=sources[0]["n"], text=_clip(clean_sentence(first), 240))
        rewrite = rewrite_follow_up(question, history)
        self.score(rewrite.query, cands, question, rewrite.topic)
        said = _already_said(history)
        opening = ""
        pool = [c for c in cands if c.vector is not None]
        score_of: Any = lambda c: c.score  # noqa: E731 - how a continuation compares to the lead
        if self.strategy == "learned" and pool:
            model = selector.load_model()
            x = self.pool_features(question, pool)
            likely = {id(c): float(p) for c, p in zip(pool, model.probabilities(x), strict=True)}
            base = {id(c): c.score for c in cands}  # the "answer" strategy's scores
            for c in cands:
                c.score = -math.inf  # only the embedded pool can lead or join
            for c, r in zip(pool, model.ranks(x), strict=True):
                c.score = float(r)
            ranked = sorted(pool, key=lambda c: (-c.score, c.rank, c.position))
            best = ranked[0]
            unlikely = answer_kind(question) is not None and max(likely.values()) < model.refuse_below
            if unlikely or max(base.values()) < MIN_RELEVANCE:
                return NOTHING_FOUND.format(n=best.n, text=_clip(best.text, 240))
            chosen = self.choose_learned(ranked, said, model, likely)
            score_of = lambda c: base.get(id(c), 0.0)  # noqa: E731 - as the "answer" strategy
            span = answer_span(question, chosen[0].text)
            opening = f"**{span}** — " if span else ""
        else:
            ranked = sorted(cands, key=lambda c: (-c.score, c.rank, c.position))
            best = ranked[0]
            if best.score < MIN_RELEVANCE:
                return NOTHING_FOUND.format(n=best.n, text=_clip(best.text, 240))
            chosen = self.choose(ranked, said)
        lead, rest = chosen[:1], chosen[1:]
        best = lead[0]
        if self.strategy == "learned" and _pronoun_led(best) and best.previous is not None:
            # "His son published the note": the sentence that names who (two at most) comes
            # with it. It goes first when the question says "he" / "it" itself (a follow-up,
            # whose reader needs the name) or when it is likely enough to join the answer on
            # its own (the two are one statement, read in order); else after it, so the
            # sentence likeliest to hold the answer leads
            context = [best.previous]
            while _pronoun_led(context[0]) and context[0].previous is not None and len(context) < 2:
                context.insert(0, context[0].previous)
            context = [c for c in context if _normalized(c.text) not in said]
            named_first = _refers_back(question) or any(c in rest for c in context)
            lead = context + lead if named_first else lead + context
            rest = [c for c in rest if c not in context][: max(0, MAX_SENTENCES - len(lead))]
        elif (
            best.previous is not None
            and best.text.split()[0].lower().strip(",") in PRONOUN_STARTS
            and _normalized(best.previous.text) not in said
        ):
            # "He finished in three years" needs the sentence before it
            lead.insert(0, best.previous)
            rest = [c for c in rest if c is not best.previous][: MAX_SENTENCES - 2]
        elif self.strategy != "v1" and best.next is not None and _continues(best, said, score_of):
            # "Fermat wrote a note in the margin." + "He claimed that …": what the note said
            lead.append(best.next)
            rest = [c for c in rest if c is not best.next][: MAX_SENTENCES - 2]
        # the best sentence leads; the others follow, by source, in document order
        order: dict[int, int] = {}
        for i, c in enumerate(rest):
            order.setdefault(c.n, i)
        rest.sort(key=lambda c: (order[c.n], c.position))
        chosen = lead + rest
        return opening + " ".join(_with_citation(c.text, c.n) for c in chosen)

    def featurize(
        self,
        question: str,
        sources: Sequence[dict[str, Any]],
        history: Sequence[dict[str, Any]] = (),
    ) -> tuple[list[Candidate], np.ndarray]:
        """The embedded candidates and their selector features, as ``compose`` computes them
        (benchmarks/train_answer_selector.py fits the model on these)."""
        cands = self.candidates(sources)
        if not cands:
            return [], np.zeros((0, len(selector.FEATURES)))
        rewrite = rewrite_follow_up(question, history)
        self.score(rewrite.query, cands, question, rewrite.topic)
        pool = [c for c in cands if c.vector is not None]
        return pool, self.pool_features(question, pool)

    def pool_features(self, question: str, pool: Sequence[Candidate]) -> np.ndarray:
        """The learned selector's feature rows for the embedded candidates (after ``score``)."""
        return selector.features(
            pool, len(set(terms(question))), expected_answer(question) is not None
        )

    def choose_learned(
        self,
        ranked: list[Candidate],
        said: set[str],
        model: selector.SelectorModel,
        likely: dict[int, float],
    ) -> list[Candidate]:
        """The best-ranked sentence leads; others (in rank order) join only when likely enough
        to hold the answer next to the likeliest (``likely``: id -> probability)."""
        fresh = [c for c in ranked if _normalized(c.text) not in said] or ranked
        best = fresh[0]
        chosen = [best]
        length = len(best.text)
        floor = max(model.add_min, model.add_ratio * max(likely.get(id(c), 0.0) for c in fresh))
        for c in fresh[1:]:
            if len(chosen) >= MAX_SENTENCES:
                break
            if likely.get(id(c), 0.0) < floor:
                continue
            if length + len(c.text) > MAX_ANSWER_CHARS or any(
                _redundant(c, other) for other in chosen
            ):
                continue
            chosen.append(c)
            length += len(c.text)
        return chosen

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


def _match(term: str, sentence_terms: frozenset[str]) -> float:
    """1 when the sentence has the term; ``PARTIAL_MATCH`` when one of its words is a compound
    ending in it ("sunlight" for "light"); else 0."""
    if term in sentence_terms:
        return 1.0
    if len(term) >= MIN_PARTIAL_CHARS and any(
        len(w) > len(term) + 2 and w.endswith(term) for w in sentence_terms
    ):
        return PARTIAL_MATCH
    return 0.0


def _bigrams(words: Sequence[str]) -> set[tuple[str, str]]:
    return set(zip(words, words[1:], strict=False))


def _follow_up_meaning(
    question: str, topic: Sequence[str], own: int, df: dict[str, int]
) -> str:
    """The text a follow-up's sentences are compared with by meaning. One without words of its
    own ("why?") means its whole topic; one with them ("and what about light?", after "What
    temperature is best for old books?") keeps only the topic's subject, the carried words
    most sentences share ("books"), and drops the aspect it replaces ("temperature")."""
    if not topic:
        return question
    if not own:
        return f"{question} {' '.join(topic)}"
    common = sorted((t for t in df if df[t] >= SUBJECT_MIN_DF), key=lambda t: -df[t])
    subject = set(common[:SUBJECT_TERMS])
    kept = [w for w in topic if stem(w.lower()) in subject]
    return f"{question} {' '.join(kept)}" if kept else question


def _pronoun_led(c: Candidate) -> bool:
    return c.text.split()[0].lower().strip(",") in PRONOUN_STARTS


def _refers_back(question: str) -> bool:
    """The question names its subject only by a pronoun ("When did he finish?")."""
    return not QUESTION_PRONOUNS.isdisjoint(WORD_RE.findall(question.lower()))


def _continues(best: Candidate, said: set[str], score_of: Any = None) -> bool:
    """The sentence after the lead carries it on ("He claimed …", "This …") and is worth
    a share of its score: it joins the lead rather than competing with it."""
    nxt = best.next
    if nxt is None or _normalized(nxt.text) in said:
        return False
    first = nxt.text.split()[0].lower().strip(",")
    score = score_of or (lambda c: c.score)
    return first in PRONOUN_STARTS and score(nxt) >= CONTINUATION_RATIO * score(best)


def _cut_at_end(content: str, last: str) -> bool:
    """The passage ends inside its last sentence (a chunk window cut it): the text ends
    without end punctuation and that sentence is the passage's last words."""
    tail = content.rstrip()
    if not tail or TERMINAL_RE.search(tail) or TERMINAL_RE.search(last):
        return False
    words = WORD_RE.findall(tail)[-3:]
    return bool(words) and WORD_RE.findall(last)[-len(words):] == words


def _redundant(a: Candidate, b: Candidate) -> bool:
    if a.vector is not None and b.vector is not None and float(a.vector @ b.vector) >= REDUNDANCY:
        return True
    small, large = sorted((a.terms, b.terms), key=len)
    return bool(small) and len(small & large) / len(small) >= 0.8


def _already_said(history: Sequence[dict[str, Any]]) -> set[str]:
    """Normalized sentences of the earlier answers, so a follow-up says something new."""
    said: set[str] = set()
    for turn in history:
        if turn.get("role") in ("assistant", "model"):
            content = OPENING_RE.sub("", turn.get("content") or "")  # "**1851** — " said first
            for s in split_sentences(content):
                said.add(_normalized(s))
    return said


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + "…"


def _with_citation(sentence: str, n: int) -> str:
    """Put the mark before the final punctuation: 'It was founded in 1851 [2].'"""
    m = re.search(r"([.!?…]+[\"'”’)\]]*)$", sentence)
    if m:
        return f"{sentence[: m.start()]} [{n}]{m.group(1)}"
    return f"{sentence} [{n}]"
