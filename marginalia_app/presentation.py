"""Pure helpers that turn answers, passages and numbers into safe Streamlit markdown.

Nothing here imports Streamlit. The pages render everything a model or a document wrote through
these functions, so no such text is ever interpreted as HTML, an image, a link, math or a
Streamlit directive:

* ``escape_markdown`` backslash-escapes every ASCII punctuation character (CommonMark allows
  it for all of them): document text and user questions render literally.
* ``render_answer`` keeps the formatting an answer is allowed to use (bold, italic, code,
  headings, lists, tables) and escapes everything that could fetch or link something
  (``< [ ] ! $ & : @ \\``, and ``www.``), turns valid citation marks into badges and shows
  invalid ones as flagged plain text. It can run on a growing prefix while an answer streams:
  the output for a prefix is always a prefix of the output for the whole answer.
* ``cited_sentences`` / ``highlight_spans`` find the part of a passage an answer sentence
  cited; ``marginalia_app.passages`` marks it in the margin's HTML.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

from marginalia_core.citations import MARK_RE, find_marks
from marginalia_core.ingest import formats
from marginalia_core.store.records import Document

# ---------------------------------------------------------------------------------------------
# escaping

_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# In an answer these stay live markdown: emphasis, headings, lists, quotes, tables, strike.
# Everything else that is punctuation and could build a link, image, autolink, HTML, entity,
# math or directive is escaped.
_ANSWER_ESCAPE = frozenset("\\[]<!$&:@")

BADGE_COLOR = "blue"
STEM_CHARS = 4  # term_spans: shortest term matched by prefix
INVALID_MARK_COLOR = "red"
UNSUPPORTED_COLOR = "orange"  # the "not found in [n]" note on a mark whose passage lacks its sentence


# Streamlit's GFM autolinks "http://…", "www.…" and "a@b.c" even when their punctuation is
# escaped; an invisible WORD JOINER after the scheme colon, the "www" or the "@" breaks them.
WORD_JOINER = "\u2060"
_AUTOLINK_RE = re.compile(r"(?i)(?<=[a-z]):(?=//)|(?<![\w.])www(?=\.)|@(?=\w)")


def break_autolinks(text: str) -> str:
    return _AUTOLINK_RE.sub(lambda m: m.group(0) + WORD_JOINER, text)


def escape_markdown(text: str) -> str:
    """``text`` as markdown that renders exactly as written (no formatting, links or HTML)."""
    text = break_autolinks(text)
    return "".join("\\" + ch if ch in _ASCII_PUNCT else ch for ch in text)


def escape_inline(text: str, limit: int | None = None) -> str:
    """One line of literal text for a label (expander, button, pill, caption)."""
    text = " ".join(str(text).split())
    if limit is not None and len(text) > limit:
        text = text[: max(1, limit - 1)].rstrip() + "…"
    return escape_markdown(text)


def escape_multiline(text: str) -> str:
    """Literal text keeping its paragraphs (blank lines) and line breaks."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    out = []
    for p in paragraphs:
        lines = [escape_markdown(" ".join(line.split())) for line in p.splitlines() if line.strip()]
        out.append("  \n".join(lines))
    return "\n\n".join(out)


# ---------------------------------------------------------------------------------------------
# answers

_FENCE_RE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_MAYBE_FENCE_RE = re.compile(r"^ {0,3}(?:`{3,}|~{3,}|`{1,2}$|~{1,2}$| {0,3}$)")
_PENDING_MARK_RE = re.compile(r"\[[\d\s,;–-]{0,20}")


def _badges(numbers: Iterable[int], link: Callable[[int], str] | None = None) -> str:
    """Valid marks as badges or, with ``link`` (number -> card id), as in-page links to their
    margin cards (styled as badges by the shell's CSS)."""
    if link is None:
        return " ".join(f":{BADGE_COLOR}-badge[{n}]" for n in numbers)
    return " ".join(f"[\\[{n}\\]](#{link(n)})" for n in numbers)


def _flagged(raw_mark: str) -> str:
    return f":{INVALID_MARK_COLOR}[{escape_markdown(raw_mark)}]"


def _closing_fence(line: str, fence: tuple[str, int]) -> bool:
    char, length = fence
    stripped = line.strip()
    return (
        len(line) - len(line.lstrip(" ")) <= 3
        and len(stripped) >= length
        and set(stripped) == {char}
    )


def _validator(valid: int | Collection[int]) -> Callable[[int], bool]:
    if isinstance(valid, int):
        return lambda x: 1 <= x <= valid
    allowed = frozenset(valid)
    return lambda x: x in allowed


def _render(
    text: str,
    valid: int | Collection[int],
    final: bool,
    link: Callable[[int], str] | None = None,
    notes: Mapping[int, tuple[int, ...]] | None = None,
) -> str:
    """Markdown for the part of ``text`` whose rendering can no longer change.

    With ``final`` everything is resolved (an unclosed backtick is a literal backtick, an
    unfinished mark is text). Scans left to right, so the result for a prefix of ``text`` is a
    prefix of the result for ``text``. ``valid`` is k (marks 1..k are valid) or the set of
    valid source numbers.
    """
    ok = _validator(valid)
    out: list[str] = []
    fence: tuple[str, int] | None = None
    i, n = 0, len(text)
    while i < n:
        nl = text.find("\n", i)
        complete = nl != -1 or final
        line_end = n if nl == -1 else nl
        line = text[i:line_end]
        newline = "\n" if nl != -1 else ""
        if fence is not None:
            # inside a fenced block everything is code, shown verbatim, closed or not
            out.append(line + newline)
            if nl != -1 and _closing_fence(line, fence):
                fence = None
            i = line_end + len(newline)
            continue
        if not complete and _MAYBE_FENCE_RE.match(line):
            break  # could become a fence opener: wait for the whole line
        opener = _FENCE_RE.match(line)
        if opener and not (opener.group(2)[0] == "`" and "`" in opener.group(3)):
            out.append(line + newline)
            fence = (opener.group(2)[0], len(opener.group(2)))
            i = line_end + len(newline)
            continue
        stopped = _render_line(text, i, line_end, ok, complete, out, link, notes)
        if stopped is not None:
            break
        out.append(newline)
        i = line_end + len(newline)
    return "".join(out)


def _render_line(
    text: str,
    start: int,
    end: int,
    ok: Callable[[int], bool],
    complete: bool,
    out: list[str],
    link: Callable[[int], str] | None = None,
    notes: Mapping[int, tuple[int, ...]] | None = None,
) -> int | None:
    """Render prose ``text[start:end]`` into ``out``; return where it stopped if it must wait."""
    p = start
    while p < end:
        ch = text[p]
        if ch == "`":
            run = p
            while run < end and text[run] == "`":
                run += 1
            width = run - p
            closer = re.compile(rf"(?<!`)`{{{width}}}(?!`)").search(text, run, end)
            if closer and not complete and closer.end() == end:
                return p  # the closing run may still grow ("`x`" then "``"): not a closer yet
            if closer:
                out.append(text[p : closer.end()])  # a code span: verbatim
                p = closer.end()
                continue
            if not complete:
                return p
            out.append("\\`" * width)
            p = run
            continue
        if ch == "[":
            mark = MARK_RE.match(text, p)
            if mark and mark.end() <= end:
                found = find_marks(mark.group(0))
                numbers = found[0].numbers if found else ()
                if numbers and all(ok(x) for x in numbers):
                    out.append(_badges(numbers, link))
                    if notes and p in notes:
                        out.append(_not_found(notes[p]))
                else:
                    out.append(_flagged(mark.group(0)))
                p = mark.end()
                continue
            if not complete and _PENDING_MARK_RE.fullmatch(text, p, end):
                return p
            out.append("\\[")
            p += 1
            continue
        if ch == "." and text[max(start, p - 3) : p].lower() == "www":
            out.append(WORD_JOINER + "\\.")  # no "www." autolink
        elif ch == ":" and p > start and text[p - 1].isalpha():
            out.append("\\:" + WORD_JOINER)  # no "scheme://" autolink
        elif ch == "@":
            out.append("\\@" + WORD_JOINER)  # no e-mail autolink
        elif ch in _ANSWER_ESCAPE:
            out.append("\\" + ch)
        else:
            out.append(ch)
        p += 1
    return None


def render_answer(
    text: str,
    valid: int | Collection[int],
    link: Callable[[int], str] | None = None,
    support: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """An answer as safe markdown: formatting kept, valid marks (1..k, or the given numbers)
    as badges (or, with ``link``, as links to their margin cards), others flagged. ``support``
    (the answer's per-sentence check, ``done``'s ``support``): the last mark of each unsupported
    sentence gets a "not found in [n]" note."""
    return _render(text, valid, final=True, link=link, notes=unsupported_marks(text, support))


def unsupported_marks(
    text: str, support: Sequence[Mapping[str, Any]] | None
) -> dict[int, tuple[int, ...]]:
    """Where the note goes: the offset of each unsupported sentence's last mark in ``text``,
    with the source numbers that sentence cites."""
    notes: dict[int, tuple[int, ...]] = {}
    cursor = 0
    for item in support or ():
        at = text.find(str(item.get("sentence") or ""), cursor)
        if at == -1 or not item.get("sentence"):
            continue
        end = at + len(item["sentence"])
        cursor = end
        if item.get("supported", True):
            continue
        marks = find_marks(text[at:end])
        if marks:
            notes[at + marks[-1].start] = tuple(int(n) for n in item.get("marks") or ())
    return notes


def _not_found(numbers: tuple[int, ...]) -> str:
    listed = " ".join(f"\\[{n}\\]" for n in numbers)
    return f" :{UNSUPPORTED_COLOR}-badge[:material/search_off: not found in {listed}]"


class AnswerStream:
    """Incremental ``render_answer`` for ``st.write_stream``: feed raw pieces, get markdown
    increments whose concatenation is ``render_answer`` of everything fed."""

    def __init__(self, valid: int | Collection[int]):
        self.k = valid
        self.raw = ""
        self.sent = ""

    def feed(self, piece: str) -> str:
        self.raw += piece
        return self._delta(_render(self.raw, self.k, final=False))

    def finish(self) -> str:
        return self._delta(_render(self.raw, self.k, final=True))

    def _delta(self, markdown: str) -> str:
        if not markdown.startswith(self.sent):  # cannot happen by construction; never repeat
            return ""
        delta = markdown[len(self.sent) :]
        self.sent = markdown
        return delta


# ---------------------------------------------------------------------------------------------
# which part of a passage an answer cited

_SENTENCE_END_RE = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+|\n+")
_WORD_RE = re.compile(r"\w+", re.UNICODE)
_QUOTED_RE = re.compile(r"[“\"]([^“”\"]{20,})[”\"]")  # no opening quote inside: linear
_FORMATTING_RE = re.compile(r"(^|\s)(#{1,6}|[-*+]|\d+[.)])\s+|[*_`~]+")
_STOP_WORDS = (
    "a an and are as at be but by for from has have in is it its of on or that the this to "
    "was were which with"
)
_STOP = frozenset(_STOP_WORDS.split())
MIN_MATCH_CHARS = 12
FUZZY_MIN_SHARE = 0.6
FUZZY_MIN_WORDS = 3


def _clean_sentence(sentence: str) -> str:
    sentence = MARK_RE.sub("", sentence)
    sentence = _FORMATTING_RE.sub(lambda m: m.group(1) or "", sentence)
    sentence = " ".join(sentence.split())
    sentence = re.sub(r"\s+([.,;:!?…])", r"\1", sentence)
    return sentence.strip(" \"'“”‘’()")


def cited_sentences(answer: str, k: int | None = None) -> dict[int, list[str]]:
    """For each source number, the answer sentences that cited it (marks removed).

    A mark right after a sentence's final punctuation ("… 1851. [2]") belongs to that sentence.
    Numbers outside 1..k are ignored when ``k`` is given.
    """
    pieces = [p for p in _SENTENCE_END_RE.split(answer) if p and p.strip()]
    out: dict[int, list[str]] = {}
    previous: str | None = None
    for piece in pieces:
        marks = find_marks(piece)
        leading = re.match(r"^\s*((?:\[[^\]]*\]\s*)+)", piece)
        lead_numbers: list[int] = []
        if leading and previous is not None:
            for mark in find_marks(leading.group(1)):
                lead_numbers.extend(mark.numbers)
            piece_body = piece[leading.end() :]
            marks = find_marks(piece_body)
        else:
            piece_body = piece
        sentence = _clean_sentence(piece_body)
        for n in lead_numbers:
            if previous and (k is None or 1 <= n <= k):
                out.setdefault(n, [])
                if previous not in out[n]:
                    out[n].append(previous)
        for mark in marks:
            for n in mark.numbers:
                if (k is None or 1 <= n <= k) and sentence:
                    out.setdefault(n, [])
                    if sentence not in out[n]:
                        out[n].append(sentence)
        if sentence:
            previous = sentence
    return out


def display_text(content: str) -> str:
    """A passage as shown in the margin: paragraphs kept, line wraps and runs of spaces joined."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", content)]
    return "\n\n".join(p for p in paragraphs if p)


def _terms(text: str) -> set[str]:
    return {w for w in _WORD_RE.findall(text.lower()) if len(w) > 1 and w not in _STOP}


def _sentence_spans(display: str) -> list[tuple[int, int]]:
    spans = []
    start = 0
    for m in _SENTENCE_END_RE.finditer(display):
        if m.start() > start:
            spans.append((start, m.start()))
        start = m.end()
    if start < len(display):
        spans.append((start, len(display)))
    return [(a, b) for a, b in spans if display[a:b].strip()]


def _find_exact(display: str, needle: str) -> tuple[int, int] | None:
    needle = needle.rstrip("…").rstrip()
    if len(needle) < MIN_MATCH_CHARS:
        return None
    hay = display.lower()
    idx = hay.find(needle.lower())
    if idx < 0:
        # the answer may have dropped a trailing full stop or changed quotes
        trimmed = needle.rstrip(".!?;:").lower()
        if len(trimmed) >= MIN_MATCH_CHARS:
            idx = hay.find(trimmed)
            if idx >= 0:
                return idx, idx + len(trimmed)
        return None
    return idx, idx + len(needle)


def highlight_spans(display: str, sentences: Sequence[str]) -> list[tuple[int, int]]:
    """Character spans of ``display`` that the cited ``sentences`` came from, merged and sorted.

    Exact (case-insensitive) matches first, also for quoted parts of a sentence; otherwise the
    passage sentence sharing most of the cited sentence's words (a paraphrase), if it shares
    enough of them.
    """
    spans: list[tuple[int, int]] = []
    passage_sentences = None
    for sentence in sentences:
        found = _find_exact(display, sentence)
        if found is None:
            for quoted in _QUOTED_RE.findall(sentence):
                found = _find_exact(display, quoted.strip())
                if found:
                    break
        if found is None:
            words = _terms(sentence)
            if len(words) >= FUZZY_MIN_WORDS:
                if passage_sentences is None:
                    passage_sentences = _sentence_spans(display)
                best, best_share = None, 0.0
                for a, b in passage_sentences:
                    shared = len(words & _terms(display[a:b]))
                    share = shared / len(words)
                    if shared >= FUZZY_MIN_WORDS and share > best_share:
                        best, best_share = (a, b), share
                if best and best_share >= FUZZY_MIN_SHARE:
                    found = best
        if found:
            spans.append(found)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def term_spans(content: str, terms: Sequence[str]) -> list[tuple[int, int]]:
    """Where the query's ``terms`` occur in ``display_text(content)``, for the margin's HTML.
    A word matches a term it starts with when both share at least STEM_CHARS letters, a rough
    stand-in for the index's porter stemming ("margins" for "margin")."""
    display = display_text(content)
    words = [t.lower() for t in terms if t]
    if not words:
        return []
    spans = []
    for m in re.finditer(r"[^\W_]+", display):
        w = m.group(0).lower()
        if any(w == t or (len(t) >= STEM_CHARS and (w.startswith(t[:max(STEM_CHARS, len(t) - 2)])))
               for t in words):
            spans.append(m.span())
    return spans


# ---------------------------------------------------------------------------------------------
# numbers and labels

def plural(n: int, word: str) -> str:
    """"1 question", "2 questions": a count a person reads, never "question(s)"."""
    return f"{n:,} {word}{'s' * (n != 1)}"


def format_size(n: int | float | None) -> str:
    if n is None:
        return "–"
    n = float(n)
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            if unit == "bytes":
                return f"{int(n)} bytes"
            return f"{n:.1f} {unit}" if n < 10 else f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.0f} GB"  # pragma: no cover


def sortable_number(value: float | None, spec: str, width: int) -> str:
    """A number as text for a grid column, or "" when absent (the grid paints a missing number
    as a grey "None"); padded to ``width`` so the text sorts in numeric order."""
    return "" if value is None else format(value, spec).rjust(width)


def percent(score: float | None) -> str:
    """A cosine score as "% relevance": 0.8234 -> "82 %"."""
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return "–"
    return f"{round(max(0.0, min(1.0, float(score))) * 100)} %"


def page_label(
    page: int | None, page_end: int | None = None, mime: str | None = None, location: str = ""
) -> str:
    """A passage's place: its stored ``location`` ("slide 3", "sheet Budget, rows 12–40") when
    it has one, else "p. 3" / "pp. 3–5"; "" without a page, or for a document without pages
    (pass ``mime``: a text or Markdown file is stored as one page 1, which is never shown)."""
    if location:
        return location
    if not page or (mime is not None and formats.by_mime(mime).location != "page"):
        return ""
    if page_end and page_end != page:
        return f"pp. {page}–{page_end}"
    return f"p. {page}"


def document_place(doc: Document, start: int, end: int) -> str:
    """Where locations ``start``..``end`` of a stored document are, for tables: "3" / "3–5" for
    a PDF's pages, the label otherwise ("slide 2", "sheet Budget, rows 12–40"), "" for text."""
    kind = formats.by_mime(doc.mime).location
    units = formats.decode_units(doc.locations, doc.page_count)
    label = formats.location_label(kind, units, start, end)
    return label.split(" ", 1)[-1] if kind == "page" else label


def ocr_label(doc: Document) -> str:
    """How a document's text was read, for the library table: "" (its text layer), "OCR"
    (every page) or "OCR, 3 of 5 pages" (a mixed PDF)."""
    ocr = len(doc.ocr_pages)
    if not ocr:
        return ""
    pages = doc.page_count or ocr
    return "OCR" if ocr >= pages else f"OCR, {ocr} of {pages} pages"


def page_ranges(pages: Sequence[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> "1–3, 7, 9–10"."""
    runs: list[list[int]] = []
    for p in sorted({int(x) for x in pages}):
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)


# (health key, how to say it) in the order a person should read them
_HEALTH_PROBLEMS = (
    ("unreadable", "unreadable"),
    ("empty", "no text"),
    ("garbled", "garbled"),
    ("ocr", "read by OCR"),
)


def health_summary(doc: Document) -> str:
    """One short cell for the library table: "all read", or what was not read well ("2 pages
    no text · 1 garbled · 3 tables"); "not checked" for documents indexed before it was."""
    health = doc.parse_health
    if not health:
        return "not checked"
    parts = []
    for key, words in _HEALTH_PROBLEMS:
        n = len(health.get(key) or ())
        if n:
            unit = f"{n} page{'s' * (n != 1)} " if int(health.get("pages") or 1) > 1 else ""
            parts.append(f"{unit}{words}")
    tables = int(health.get("tables") or 0)
    if tables:
        parts.append(plural(tables, "table"))
    return " · ".join(parts) if parts else "all read"


def health_details(doc: Document) -> list[str]:
    """Plain lines naming the pages behind each problem, for the "What was not read" list."""
    health = doc.parse_health
    paged = int(health.get("pages") or 1) > 1
    lines = []
    for key, words in _HEALTH_PROBLEMS:
        pages = health.get(key) or ()
        if pages:
            lines.append(f"{words}: pages {page_ranges(pages)}" if paged else words)
    tables = int(health.get("tables") or 0)
    if tables:
        lines.append(f"{plural(tables, 'table')} found (their cells are read as text)")
    return lines


def has_health_problems(doc: Document) -> bool:
    health = doc.parse_health
    return any(health.get(key) for key, _ in _HEALTH_PROBLEMS)


def format_created(stamp: str | None) -> str:
    """An ISO timestamp as a short local date and time."""
    if not stamp:
        return ""
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    return moment.astimezone().strftime("%Y-%m-%d %H:%M")


def snippet(text: str, query: str, width: int = 80) -> str:
    """Plain text around the first case-insensitive occurrence of ``query`` in ``text``, with
    "…" where it was cut (escape before using it as markdown)."""
    flat = " ".join(str(text).split())
    at = flat.lower().find(" ".join(query.split()).lower()) if query.strip() else -1
    if at < 0 or len(flat) <= width:
        return flat if len(flat) <= width else flat[: width - 1].rstrip() + "…"
    start = max(0, at - width // 3)
    end = min(len(flat), start + width)
    start = max(0, end - width)
    return ("…" if start else "") + flat[start:end].strip() + ("…" if end < len(flat) else "")


def day_label(stamp: str | None, today: date | None = None) -> str:
    """The local day of an ISO timestamp for grouping a list: "Today", "Yesterday", weekday
    names within a week, then "3 Dec 2026"."""
    moment = parse_created(stamp)
    if moment is None:
        return "Undated"
    today = today or datetime.now().date()
    days = (today - moment.date()).days
    if days <= 0:
        return "Today"
    if days == 1:
        return "Yesterday"
    if days < 7:
        return moment.strftime("%A")
    return f"{moment.day} {moment.strftime('%b %Y')}"


def parse_created(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp).astimezone().replace(tzinfo=None)
    except ValueError:
        return None


def stage_progress(event: dict[str, Any]) -> tuple[float, str]:
    """(fraction 0..1, plain-text step) for an ingestion ``stage`` event."""
    stage = event.get("stage")
    if stage == "extracting":
        total = int(event.get("total") or 0)
        if total:
            done = int(event.get("done") or 0)
            return 0.1 * done / total, f"Reading page {done} of {total}"
        return 0.05, "Reading the file…"
    if stage == "ocr":
        total = int(event.get("total") or 0)
        done = int(event.get("done") or 0)
        share = done / total if total else 1.0
        return 0.05 + 0.05 * share, f"Reading scanned pages by OCR {done}/{total}"
    if stage == "chunking":
        if "chunks" in event:
            return 0.15, f"Split into {plural(int(event['chunks']), 'passage')}"
        return 0.1, "Splitting into passages…"
    if stage == "embedding":
        total = int(event.get("total") or 0)
        done = int(event.get("done") or 0)
        share = done / total if total else 1.0
        cached = int(event.get("cached") or 0)
        if not total:
            return 0.95, f"All {plural(cached, 'passage')} embedded before: reused"
        reused = f" ({cached:,} reused)" if cached else ""
        return 0.15 + 0.8 * share, f"Embedding passages {done}/{total}{reused}"
    if stage == "storing":
        return 0.97, "Saving…"
    return 0.0, str(stage or "")


# ---------------------------------------------------------------------------------------------
# ingestion jobs


def format_duration(seconds: float | None) -> str:
    """``45 s``, ``3 min 05 s``, ``1 h 02 min``: a short, readable span."""
    if seconds is None:
        return ""
    total = max(0, int(round(seconds)))
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def job_progress(job: Any, now: datetime | None = None) -> tuple[float, str]:
    """(fraction 0..1, one plain line) for an ingestion job: file i of n, pages read, passages
    embedded, elapsed and time left. ``job`` is an ``ingest.jobs.Job``."""
    parts = []
    if job.batch_size > 1:
        parts.append(f"file {job.position} of {job.batch_size}")
    if job.status == "queued":
        parts.append("waiting")
        return 0.0, " · ".join(parts)
    if job.pages_total > 1:
        parts.append(f"page {job.pages_done:,} of {job.pages_total:,}")
    if job.chunks_total:
        parts.append(f"{job.chunks_done:,} of {plural(job.chunks_total, 'passage')} embedded")
    elif job.stage in ("", "extracting") and job.pages_total <= 1:
        parts.append("reading")
    if job.cancel_requested:
        parts.append("cancelling…")
    elapsed = job.elapsed(now)
    if elapsed is not None:
        parts.append(f"{format_duration(elapsed)} elapsed")
    eta = job.eta(now)
    if eta is not None and not job.cancel_requested:
        parts.append(f"about {format_duration(eta)} left")
    return job.fraction, " · ".join(parts)
