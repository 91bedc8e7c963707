"""Parse health: what extraction could not read well, per document, so a person sees it before
asking about it.

Measured on the extracted text, page by page (a text file is one page): pages with no text
(blank, or images without OCR), pages read by OCR (recognised, not typed), pages pypdf could
not parse, pages whose text looks garbled (replacement characters from a broken font mapping,
or "symbol soup": mostly characters that are neither letters, digits nor ordinary punctuation,
as when a font's glyphs map to the wrong code points), and tables found (Markdown tables from
the document readers, and runs of number-heavy lines: a PDF table read as text).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from marginalia_core.ingest.extraction import MIN_ALNUM_PER_PAGE, Extracted

# A page is garbled when at least this share of its visible characters are U+FFFD / private-use
# glyphs ...
GARBLED_REPLACEMENT_SHARE = 0.01
# ... or when letters and digits are less than this share of them (prose is ~80 %, a page of
# formulas ~55 %; a font mapped to the wrong code points reads as punctuation and symbols)
GARBLED_MIN_ALNUM_SHARE = 0.45
# pages with fewer visible characters are not judged garbled (too little to tell); pages with
# fewer letters and digits than extraction's MIN_ALNUM_PER_PAGE are "no text"
MIN_VISIBLE_CHARS = 20
# A "numeric table" read as text: this many consecutive lines with at least TABLE_MIN_NUMBERS
# numbers each and fewer letters than digits.
TABLE_MIN_LINES = 3
TABLE_MIN_NUMBERS = 3
_MARKDOWN_RULE = re.compile(  # no two \s* side by side: a line of spaces made it backtrack
    r"^\s*(?:\|\s*)?:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)+(?:\|\s*)?$")
_NUMBER = re.compile(r"(?<!\w)[-+(]?\d[\d.,:%]*\)?(?!\w)")
_ORDINARY = frozenset(" \t\n.,;:!?'\"()[]{}-–—/&%$€£#*+=<>@_…’‘“”«»§°|~^`\\")


def _visible(text: str) -> list[str]:
    return [c for c in text if not c.isspace()]


def page_is_garbled(text: str) -> bool:
    chars = _visible(text)
    if len(chars) < MIN_VISIBLE_CHARS:
        return False
    broken = sum(1 for c in chars if c == "\ufffd" or unicodedata.category(c) in ("Co", "Cs"))
    if broken / len(chars) >= GARBLED_REPLACEMENT_SHARE:
        return True
    alnum = sum(1 for c in chars if c.isalnum())
    return alnum / len(chars) < GARBLED_MIN_ALNUM_SHARE


def count_tables(text: str) -> int:
    """Markdown tables (a header rule row) plus runs of number-heavy lines."""
    tables = 0
    run = 0
    for line in text.split("\n"):
        if _MARKDOWN_RULE.match(line):
            tables += 1
            run = 0
            continue
        numbers = len(_NUMBER.findall(line))
        letters = sum(c.isalpha() for c in line)
        digits = sum(c.isdigit() for c in line)
        if numbers >= TABLE_MIN_NUMBERS and letters < digits and not line.lstrip().startswith("|"):
            run += 1
            if run == TABLE_MIN_LINES:
                tables += 1
        else:
            run = 0
    return tables


def page_texts(text: str, page_starts: list[int]) -> list[str]:
    ends = [*page_starts[1:], len(text)]
    return [text[a:b] for a, b in zip(page_starts, ends)]


def parse_health(extracted: Extracted) -> dict[str, Any]:
    """The stored summary (JSON): page lists are 1-based."""
    pages = page_texts(extracted.text, extracted.page_starts)
    unreadable = list(extracted.skipped_pages)
    ocr = list(extracted.ocr_pages)
    garbled = [i for i, t in enumerate(pages, start=1) if page_is_garbled(t)]
    empty = [i for i, t in enumerate(pages, start=1)
             if sum(c.isalnum() for c in t) < MIN_ALNUM_PER_PAGE
             and i not in unreadable and i not in garbled]
    return {
        "pages": extracted.page_count,
        "empty": empty,
        "ocr": ocr,
        "unreadable": unreadable,
        "garbled": garbled,
        "tables": count_tables(extracted.text),
    }
