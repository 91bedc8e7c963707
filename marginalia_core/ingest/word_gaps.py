"""Spaces back between words that a PDF sets apart by position instead of a space character.

Layout tools often draw each word (or each justified run) as its own text run, moved along
the line with no space glyph between. pypdf guesses a word break from the font's declared
space width, so tightly justified lines, condensed type (``Tz`` < 100) and fonts without
width tables come out as "Inthefallof". The page's geometry does show the break: pdfium gives
every glyph's advance box, and between letters of one word the next glyph starts where the
last one ended. Where the gap on the same line exceeds a fraction of the type size, this adds a
space to pypdf's text (which stays the base: its encoding handling and repairs are what the
rest of extraction relies on). Only spaces are added; nothing pypdf read is changed or removed.

One exception, by a measured rule: mathematics. pypdf reads the glyphs of TeX's symbol fonts
through their built-in encoding, so "∀s∈I" comes out as "8s2I" and "{A ∈ R}" as "fA2 Rg";
pdfium maps the same glyphs to their Unicode symbols. A page on which pdfium's text holds at
least ``MATH_GAIN`` more mathematical symbols than pypdf's, and no fewer letters (within
``MIN_LETTER_SHARE``), is taken from pdfium (benchmarks/pdf_cleanup.py counts the pages this
picks on the eval PDFs: only GeoTopo's mathematics pages).
"""

from __future__ import annotations

import ctypes
import difflib
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

# A gap wider than this share of the glyphs' height (ascent to descent, ~1.1 em) is a word
# break: a word space is 0.25-0.33 em, letters inside a word touch (gap ~0) or overlap when
# kerned; tracked (letter-spaced) type stays below ~0.1 em.
WORD_GAP_SHARE = 0.14
# Two glyphs are on one line when their boxes overlap vertically by this share of the smaller.
SAME_LINE_OVERLAP = 0.5
# Pages whose text differs from pdfium's (other glyph mappings, other reading order) are
# aligned with difflib; beyond this many glyphs the alignment costs more than it is worth.
MAX_ALIGN_GLYPHS = 20_000
# pdfium reports a line-end hyphen it thinks is soft as U+FFFE (older builds: U+0002).
_PDFIUM_HYPHENS = {0xFFFE: "-", 0x0002: "-"}
_PDFIUM_HYPHEN_TABLE = str.maketrans({chr(k): v for k, v in _PDFIUM_HYPHENS.items()})
# pdfium's text replaces pypdf's on a page when it holds at least this many more mathematical
# symbols (∈ ⊆ ∀ ∂ ∅ ×) ...
MATH_GAIN = 3
# ... and at least this share of pypdf's letters (no words lost to another reading order)
MIN_LETTER_SHARE = 0.95


@contextmanager
def open_pages(data: bytes, password: str | None) -> Iterator[pdfium.PdfDocument | None]:
    """The PDF opened by pdfium for :func:`respace`, or ``None`` when pdfium cannot open it
    (pypdf repairs some files pdfium refuses; those keep pypdf's spacing)."""
    try:
        pdf = pdfium.PdfDocument(data, password=password or None)
    except Exception:  # pdfium raises its own error types for damaged files
        yield None
        return
    try:
        yield pdf
    finally:
        pdf.close()


def math_symbols(text: str) -> int:
    """Mathematical symbols (not Greek letters: pdfium reads some Arabic fonts as Greek)."""
    return sum(1 for c in text if unicodedata.category(c) == "Sm" or "\u2200" <= c <= "\u22ff")


def pdfium_reads_better(pypdf_text: str, pdfium_text: str) -> bool:
    """The measured rule (module docstring): pdfium's symbols, no letters lost."""
    if math_symbols(pdfium_text) - math_symbols(pypdf_text) < MATH_GAIN:
        return False
    letters = sum(c.isalpha() for c in pypdf_text)
    return sum(c.isalpha() for c in pdfium_text) >= MIN_LETTER_SHARE * letters


def respace_page(pdf: pdfium.PdfDocument, index: int, text: str) -> str:
    """pypdf's ``text`` of page ``index`` with the word gaps its geometry shows, or pdfium's
    text where it reads the page's mathematics and pypdf does not. Pages where pdfium's own
    reading finds no more words than ``text`` has are returned untouched without the
    per-glyph pass (most pages: it costs ~10 ms a page)."""
    page = pdf[index]
    textpage = page.get_textpage()
    try:
        own = textpage.get_text_range().translate(_PDFIUM_HYPHEN_TABLE)
        if pdfium_reads_better(text, own):
            return own
        if len(own.split()) <= len(text.split()):
            return text
        glyphs, breaks = glyph_breaks(textpage)
    finally:
        textpage.close()
        page.close()
    return respace(text, glyphs, breaks)


def glyph_breaks(textpage: pdfium.PdfTextPage) -> tuple[str, list[bool]]:
    """A page's glyphs in pdfium's order, whitespace left out, and for each whether a word
    gap precedes it on its line."""
    raw = textpage.raw
    rect = pdfium_c.FS_RECTF()
    glyphs: list[str] = []
    breaks: list[bool] = []
    last: tuple[float, float, float, float] | None = None  # left, bottom, right, top
    for i in range(pdfium_c.FPDFText_CountChars(raw)):
        code = pdfium_c.FPDFText_GetUnicode(raw, i)
        ch = _PDFIUM_HYPHENS.get(code) or chr(code)
        if not code or ch.isspace():
            continue
        pdfium_c.FPDFText_GetLooseCharBox(raw, i, ctypes.byref(rect))
        box = (rect.left, rect.bottom, rect.right, rect.top)
        breaks.append(last is not None and _gap_between(last, box))
        glyphs.append(ch)
        last = box
    return "".join(glyphs), breaks


def _gap_between(a: tuple[float, float, float, float], b: tuple[float, float, float, float]
                 ) -> bool:
    """Whether glyph box ``b`` follows ``a`` on the same line after a word-sized gap."""
    height = min(a[3] - a[1], b[3] - b[1])
    if height <= 0:
        return False
    overlap = min(a[3], b[3]) - max(a[1], b[1])
    if overlap < SAME_LINE_OVERLAP * height:
        return False
    return b[0] - a[2] > WORD_GAP_SHARE * max(a[3] - a[1], b[3] - b[1])


def respace(text: str, glyphs: str, breaks: list[bool]) -> str:
    """``text`` (pypdf's) with a space added before each character that the page geometry
    (``glyphs``/``breaks`` from :func:`glyph_breaks`) shows a word gap before and ``text`` has
    no whitespace before. Characters are matched by alignment, so a page whose glyphs pypdf
    and pdfium map differently is repaired only where they agree."""
    positions = [i for i, ch in enumerate(text) if not ch.isspace()]
    if not positions or not any(breaks):
        return text
    letters = "".join(text[i] for i in positions)
    if letters == glyphs:
        blocks = [(0, 0, len(letters))]
    elif len(letters) > MAX_ALIGN_GLYPHS or len(glyphs) > MAX_ALIGN_GLYPHS:
        return text
    else:
        matcher = difflib.SequenceMatcher(None, letters, glyphs, autojunk=False)
        blocks = [(b.a, b.b, b.size) for b in matcher.get_matching_blocks() if b.size > 1]
    before: set[int] = set()
    for a, b, size in blocks:
        for k in range(1, size):  # the first glyph of a block has no matched neighbour
            here, prev = positions[a + k], positions[a + k - 1]
            if breaks[b + k] and here == prev + 1:
                before.add(here)
    if not before:
        return text
    out = []
    for i, ch in enumerate(text):
        if i in before:
            out.append(" ")
        out.append(ch)
    return "".join(out)
