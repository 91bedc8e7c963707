"""Reading Markdown text: inline marks as styled plain-text segments, and table rows as cells.

One reader for every place that meets Markdown a document wrote: the margin renders the
segments, section names and the offline answer use their text and a table's rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Segment:
    text: str
    styles: tuple[str, ...] = ()


INLINE_RE = re.compile(
    r"(?P<esc>\\[!-/:-@\[-`{-~])"
    # whole backtick runs only, as CommonMark reads them (any run was tried: cubic on "````…")
    r"|(?P<code>(?<!`)(?P<ticks>`+)(?!`)(?P<codebody>.{1,4000}?)(?<!`)(?P=ticks)(?!`))"
    r"|(?P<img>!\[(?P<alt>[^\]]*)\]\((?:[^()\s]|\([^()]*\))*(?:\s[^()]*)?\))"
    r"|(?P<link>\[(?P<linktext>[^\]]+)\]\((?:[^()\s]|\([^()]*\))*(?:\s[^()]*)?\))"
    r"|(?P<auto><(?:https?|mailto|ftp):[^>\s]*>)"
    r"|(?P<both>\*\*\*(?P<bbody>(?=\S)(?:(?!\*\*\*).)+?(?<=\S))\*\*\*)"
    r"|(?P<strong>\*\*(?P<sbody>(?=\S)(?:(?!\*\*).)+?(?<=\S))\*\*"
    r"|(?<!\w)__(?P<sbody2>(?=\S)(?:(?!__).)+?(?<=\S))__(?!\w))"
    r"|(?P<em>\*(?P<ebody>(?=[^\s*])[^*]*?(?<=[^\s*]))\*"
    r"|(?<!\w)_(?P<ebody2>(?=[^\s_])[^_]*?(?<=[^\s_]))_(?!\w))"
)
# a table row ("| a | b |"), the rule under its header ("|---|:--:|"), a cell boundary
TABLE_ROW_RE = re.compile(r"^ {0,3}\|.*\|\s*$")
TABLE_RULE_RE = re.compile(r"^ {0,3}\|(?:\s*:?-{3,}:?\s*\|)+\s*$")
CELL_SPLIT_RE = re.compile(r"(?<!\\)\|")


def parse_inline(text: str, styles: tuple[str, ...] = ()) -> list[Segment]:
    """Inline markdown as styled plain-text segments; the concatenated texts are what a reader
    sees (markers removed, link addresses and image sources dropped)."""
    out: list[Segment] = []
    pos = 0
    for m in INLINE_RE.finditer(text):
        if m.start() > pos:
            out.append(Segment(text[pos : m.start()], styles))
        if m.group("esc"):
            out.append(Segment(m.group("esc")[1], styles))
        elif m.group("code"):
            out.append(Segment(m.group("codebody"), (*styles, "code")))
        elif m.group("img") is not None and m.group("img"):
            out.append(Segment(m.group("alt") or "image", (*styles, "img")))
        elif m.group("link"):
            out.extend(parse_inline(m.group("linktext"), (*styles, "link")))
        elif m.group("auto"):
            out.append(Segment(m.group("auto")[1:-1], (*styles, "link")))
        elif m.group("both"):
            out.extend(parse_inline(m.group("bbody"), (*styles, "strong", "em")))
        elif m.group("strong"):
            body = m.group("sbody") or m.group("sbody2") or ""
            out.extend(parse_inline(body, (*styles, "strong")))
        elif m.group("em"):
            body = m.group("ebody") or m.group("ebody2") or ""
            out.extend(parse_inline(body, (*styles, "em")))
        pos = m.end()
    if pos < len(text):
        out.append(Segment(text[pos:], styles))
    return [s for s in out if s.text]


def table_cells(row: str) -> list[str]:
    """A table row's cells, as written (escaped pipes kept escaped), outer pipes dropped."""
    return CELL_SPLIT_RE.split(row.strip())[1:-1]
