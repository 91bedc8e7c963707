"""The lab's tables as wrapping HTML (``st.html``): every column readable at 1280 px, none cut
or scrolled sideways, no "None" (a missing value is a dash) and no toolbar over a cell; a
judged passage is its document and page with the whole passage in a native expandable."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

from marginalia_app import passages as margin
from marginalia_app import presentation as fmt
from marginalia_core.lab import JudgedPassage

MISSING = "–"
CSS = """<style>
.lab-table { width: 100%; border-collapse: collapse; font-size: 0.88rem; line-height: 1.4;
  table-layout: auto; }
.lab-table th { text-align: left; font-weight: 600; color: rgba(49, 51, 63, 0.75);
  border-bottom: 1px solid rgba(49, 51, 63, 0.25); padding: 0.3rem 0.5rem; }
.lab-table td { border-bottom: 1px solid rgba(49, 51, 63, 0.1); padding: 0.3rem 0.5rem;
  vertical-align: top; overflow-wrap: anywhere; }
.lab-table td:first-child { min-width: 11rem; }
.lab-table .num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
.lab-table .now td { background: rgba(85, 85, 85, 0.08); }
.lab-table .suggested td { background: rgba(192, 57, 43, 0.08); }
.lab-table .up { color: rgb(33, 130, 76); } .lab-table .down { color: rgb(192, 57, 43); }
.lab-table details summary { cursor: pointer; }
.lab-table details .mg-passage { margin: 0.3rem 0 0.4rem; padding: 0.4rem 0.6rem;
  border-left: 3px solid rgba(47, 125, 109, 0.5); background: rgba(49, 51, 63, 0.03); }
.lab-where { color: rgba(49, 51, 63, 0.65); }
</style>"""


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    numeric: bool = False
    html: bool = False  # the cell is HTML made here (passages), not text to escape
    fmt: str = ".3f"


def cell(value: Any, spec: str = ".3f") -> str:
    """A value as text: numbers formatted, None as a dash, booleans as yes / no."""
    if value is None or (isinstance(value, float) and value != value):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def table_html(rows: Sequence[dict[str, Any]], columns: Sequence[Column],
               row_class: Sequence[str] = ()) -> str:
    head = "".join(f'<th class="{"num" if c.numeric else ""}">{html.escape(c.label)}</th>'
                   for c in columns)
    body = []
    for n, row in enumerate(rows):
        cls = row_class[n] if n < len(row_class) else ""
        cells = []
        for c in columns:
            value = row.get(c.key)
            text = value if c.html and value else html.escape(cell(value, c.fmt))
            cells.append(f'<td class="{"num" if c.numeric else ""}">{text}</td>')
        body.append(f'<tr class="{cls}">{"".join(cells)}</tr>')
    return (f'{CSS}<table class="lab-table"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def show_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column],
               row_class: Sequence[str] = ()) -> None:
    st.html(table_html(rows, columns, row_class))


def where(p: JudgedPassage) -> str:
    """"caring-for-old-books.pdf · p. 2" (no page for a text or Markdown file)."""
    pages = fmt.page_label(p.page_start, p.page_end, p.mime) if p.page_start else ""
    return " · ".join(x for x in (p.document, pages) if x)


def passage_details(label: str, judged: dict[str, JudgedPassage]) -> str:
    """A judgment as HTML: its label, and the whole passage that holds it when opened."""
    p = judged.get(label)
    if p is None or not p.content:
        return html.escape(label)
    body, _ = margin.passage_html(p.content, p.mime)
    return (f'<details><summary>{html.escape(label)}</summary>'
            f'<div class="lab-where">{html.escape(where(p))}</div>'
            f'<div class="mg-passage">{body}</div></details>')


def passages_cell(labels: Sequence[str], judged: dict[str, JudgedPassage]) -> str:
    return "".join(f"<div>{passage_details(label, judged)}</div>" for label in labels)


def change(value: float | None, spec: str = "+.3f") -> str:
    """A signed change, coloured up or down (HTML)."""
    if value is None:
        return MISSING
    cls = "up" if value > 0 else "down" if value < 0 else ""
    return f'<span class="{cls}">{format(value, spec)}</span>'
