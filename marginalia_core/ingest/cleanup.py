"""Printing leftovers out of PDF page text, page by page, before pages are joined.

Books exported from layout tools carry running heads, page numbers, print-shop stamps ("4TH
PASS PAGES", ``chapter03.qxd 5/2/07 10:14 AM Page 57``), margin line numbers and rows of
decorative glyphs on every page; unremoved, they start every passage and get quoted in answers.
Working on the list of page texts keeps the page map exact: extraction computes page offsets
from the cleaned pages, so a cleaned page is still exactly where its page starts.
"""

from __future__ import annotations

import functools
import re
from collections import Counter

# A line is a running head/stamp when its shape (digits folded) recurs on at least this share
# of pages and on at least REPEAT_MIN_PAGES pages. Books alternate two running heads (book
# title on even pages, chapter on odd), so each is on ~half of a chapter's pages.
REPEAT_MIN_SHARE = 0.3
REPEAT_MIN_PAGES = 3
# In a document this long a chapter's own running head (on its ~10 % of the pages) counts too:
# there, REPEAT_MIN_PAGES at a page edge is enough.
LONG_DOCUMENT_PAGES = 12
# ... unless removing them would leave less than this share of the document's characters.
REPEAT_MIN_SHARE_KEPT = 0.5
# Longer lines are prose even when repeated (a template page, an epigraph, a refrain).
REPEAT_MAX_CHARS = 70
# Running heads, stamps and page numbers are looked for only this many text lines from a
# page's top or bottom: a page that repeats another's body keeps it.
EDGE_LINES = 3
# Margin line numbers: a page carries at least this many lines that are only a multiple of 5,
# rising down the page (5, 10, 15 ...).
LINE_NUMBER_STEP = 5
LINE_NUMBER_MIN_RUN = 3
# Ingestion cleans a growing book again and again while it reads (to embed early what will not
# change), so the per-line steps remember this many recent lines instead of redoing their
# regular expressions: a few times the distinct lines of a long book (~30 per page).
LINE_MEMORY = 1 << 15
# a word broken at a page's end is looked for in this many last characters of the page
PAGE_END_WORD_CHARS = 200
# Decorative runs: 3+ of these glyphs (spaces allowed between), or 4+ dots/dashes/underscores.
_ORNAMENTS = "*•·◆◇♦❖✦✧❧☙❦✱✲✳✴✵✶✷✸✹✺★☆○●◦□■▪▫~=+#§¶†‡⁂※〜"
_ORNAMENT_RUN = re.compile(
    "(?:[" + re.escape(_ORNAMENTS) + r"][ \t]*){3,}|(?:[.\-_–—][ \t]*){4,}"
)
_ORNAMENT_LINE = re.compile(r"^[\W_]*$")
_FOLD_DIGITS = re.compile(r"\d+")
# After folding, a run of numbers is one number: a running head that carries the page's margin
# line numbers ("12 FREE CULTURE 1 2 3 4 6 7 ... 32S 33R", the numbers different on every page)
# has one shape on every page. Proof marks glued to a number ("32S", "33R") are numbers too.
_NUMBER_RUN = re.compile(r"#[A-Z]?(?:\s+#[A-Z]?)+\b|#[A-Z]\b")
_SPACES = re.compile(r"\s+")
_PAGE_NUMBER = re.compile(
    r"^(?:(?:page|p\.)\s*)?(?:\d{1,4}|[ivxlcdm]{1,7})(?:\s*(?:of|/)\s*\d{1,4})?$", re.IGNORECASE
)
_BARE_NUMBER = re.compile(r"^\d{1,3}$")
# A footnote number glued after a word and its punctuation ("Jordan.20 He") is set off in
# brackets so the word is whole again and a reader still sees the marker: "Jordan.[20] He".
# Only after a word of 2+ letters ending in lower case, so decimals ("3.20") and initials are
# left alone, and not after reference abbreviations ("pp.20", "vol.3").
_GLUED_FOOTNOTE = re.compile(  # from a word's start only: from every letter it was quadratic
    r"(?<![^\W\d_])([^\W\d_]*[a-z])([.,;:!?\u201d\"')])(\d{1,3})(?=\s|$)")
_NUMBERED_ABBREVIATIONS = frozenset(
    {"p", "pp", "vol", "vols", "no", "nos", "fig", "figs", "ch", "chap", "art", "sec", "ed",
     "eq", "ref", "cf", "n", "nn", "para", "l", "ll", "v", "vv", "op", "cit"}
)


@functools.lru_cache(maxsize=LINE_MEMORY)
def _shape(line: str) -> str:
    """A line's identity for repetition: spacing and numbers ignored ("Page 4" = "Page 9").
    Case is kept: a running head "CHAPTER 2. WARSAW" is not the chapter's title line."""
    folded = _SPACES.sub(" ", _FOLD_DIGITS.sub("#", line)).strip()
    return _NUMBER_RUN.sub("#", folded)


def _repeated_shapes(pages: list[list[str]]) -> set[str]:
    counts: Counter[str] = Counter()
    for lines in pages:
        shapes = (_shape(line) for line in lines if line.strip())
        counts.update({shape for shape in shapes if 0 < len(shape) <= REPEAT_MAX_CHARS})
    needed = (REPEAT_MIN_PAGES if len(pages) >= LONG_DOCUMENT_PAGES
              else max(REPEAT_MIN_PAGES, REPEAT_MIN_SHARE * len(pages)))
    # a bare folded number ("#") is a page number only at a page's edge (handled there):
    # anywhere else it may be a table cell
    return {s for s, n in counts.items() if n >= needed and any(c.isalpha() for c in s)}


def _line_number_rows(lines: list[str]) -> set[int]:
    """Indexes of lines that are margin line numbers (5, 10, 15 ... rising down the page)."""
    rows = [(i, int(line)) for i, line in enumerate(lines)
            if _BARE_NUMBER.match(line) and int(line) % LINE_NUMBER_STEP == 0 and int(line)]
    found: set[int] = set()
    run: list[int] = []
    last = 0
    for i, value in rows:
        if value > last:
            run.append(i)
        else:
            if len(run) >= LINE_NUMBER_MIN_RUN:
                found.update(run)
            run = [i]
        last = value
    if len(run) >= LINE_NUMBER_MIN_RUN:
        found.update(run)
    return found


def _edge_lines(lines: list[str]) -> set[int]:
    """Indexes of a page's first and last EDGE_LINES text lines (blank lines not counted)."""
    filled = [i for i, line in enumerate(lines) if line.strip()]
    return set(filled[:EDGE_LINES]) | set(filled[-EDGE_LINES:])


def _drop_edge_page_numbers(lines: list[str]) -> list[str]:
    """Page numbers ("57", "xii", "Page 3 of 9") at a page's top or bottom; blank lines, which
    mark paragraphs, are kept."""
    edges = _edge_lines(lines)
    return [line for i, line in enumerate(lines)
            if not (i in edges and _PAGE_NUMBER.match(line.strip()))]


def _set_off_footnote(match: re.Match[str]) -> str:
    word, mark, number = match.groups()
    if len(word) < 2 or word.lower() in _NUMBERED_ABBREVIATIONS:
        return match.group(0)
    return f"{word}{mark}[{number}]"


@functools.lru_cache(maxsize=LINE_MEMORY)
def clean_line(line: str) -> str:
    """Glyph runs out, glued footnote markers set off."""
    line = _ORNAMENT_RUN.sub(" ", line)
    line = _GLUED_FOOTNOTE.sub(_set_off_footnote, line)
    return _SPACES.sub(" ", line).strip()


def clean_pages(page_texts: list[str]) -> list[str]:
    """Each page's text without running heads, stamps, page/line numbers and ornament rows.

    Margin line numbers go first, then page numbers at the edges, so that the stamps and heads
    they sat beside are at the page's edge when repeated lines are looked for. When the
    repeated lines are most of the document (a one-line page printed four times, a template),
    they are its content, not boilerplate, and are kept."""
    several = len(page_texts) > 1
    pages = []
    for text in page_texts:
        lines = text.split("\n")
        numbers = _line_number_rows(lines)
        lines = [line for i, line in enumerate(lines) if i not in numbers]
        pages.append(_drop_edge_page_numbers(lines) if several else lines)
    edges = [_edge_lines(lines) for lines in pages]
    repeated = (_repeated_shapes([[lines[i] for i in sorted(e)] for lines, e in zip(pages, edges)])
                if len(pages) >= REPEAT_MIN_PAGES else set())
    cleaned = _clean(pages, edges, repeated, several)
    before = sum(len(t) for t in page_texts)
    if repeated and sum(len(t) for t in cleaned) < REPEAT_MIN_SHARE_KEPT * before:
        cleaned = _clean(pages, edges, set(), several)
    return join_page_break_hyphens(cleaned)


# A page ending in a word broken by a hyphen ("nobil-") and the next page starting with its
# lower-case rest ("ity, and ..."): the rest moves up, so the word is whole on the first page.
_PAGE_END_HYPHEN = re.compile(r"([^\W\d_]+)-$")
_PAGE_START_REST = re.compile(r"^([^\W\d_]+)([.,;:!?\u201d\"')]*)[^\S\n]?")


def join_page_break_hyphens(pages: list[str]) -> list[str]:
    """Words hyphenated across a page break joined on the page where they start (a compound
    already hyphenated, "stop-the-" + "world", keeps its hyphen)."""
    out = list(pages)
    for i in range(len(out) - 1):
        if not out[i].endswith("-"):  # (pages are stripped) most pages: no scan at all
            continue
        end = _PAGE_END_HYPHEN.search(out[i], max(0, len(out[i]) - PAGE_END_WORD_CHARS))
        start = _PAGE_START_REST.match(out[i + 1])
        if not end or not start or not start.group(1)[0].islower():
            continue
        word_start = end.start(1)
        compound = word_start > 0 and out[i][word_start - 1] == "-"
        joined = start.group(1) + start.group(2)
        out[i] = out[i][:-1] + ("-" if compound else "") + joined
        out[i + 1] = out[i + 1][start.end():].lstrip()
    return out


def _clean(
    pages: list[list[str]], edges: list[set[int]], repeated: set[str], several: bool
) -> list[str]:
    cleaned: list[str] = []
    for lines, edge in zip(pages, edges):
        kept = [line for i, line in enumerate(lines)
                if not (i in edge and repeated and _shape(line) in repeated)]
        if several and repeated:
            kept = _drop_edge_page_numbers(kept)  # a page number that sat under a stamp
        out: list[str] = []
        for line in kept:
            if not line.strip():
                out.append("")
                continue
            fixed = clean_line(line)
            if fixed and not _ORNAMENT_LINE.match(fixed):
                out.append(fixed)
        cleaned.append(re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip())
    return cleaned
