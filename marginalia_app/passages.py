"""The margin as sanitised HTML: passages rendered as what they are, cards that an answer's
inline marks open without a rerun.

Streamlit markdown cannot run Python when a link is clicked, but an in-page link
(``#src-…``) changes the URL fragment, and CSS ``:target`` can open the card with that id. So
each answer's marks are links to card ids and the margin is one ``st.html`` block of cards
built here. Everything a document wrote is escaped with ``html.escape`` before any tag of
ours is added, so no document text can become markup; markdown documents go through a small
renderer that only knows headings, lists, quotes, emphasis and code. Raw HTML shows as text,
images show as their alt text (nothing is loaded) and links keep their text but lose their
address. Streamlit's own DOMPurify pass then runs on top of that.

Nothing here imports Streamlit.
"""

from __future__ import annotations

import base64
import html
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from marginalia_app import presentation as fmt
from marginalia_core.citations import find_marks
from marginalia_core.ingest import formats
from marginalia_core.ingest.markup import atx_heading_text
from marginalia_core.ingest.page_images import PageRenderError
from marginalia_core.markdown import (
    TABLE_ROW_RE,
    TABLE_RULE_RE,
    Segment,
    parse_inline,
    table_cells,
)
from marginalia_core.store.records import Message

if TYPE_CHECKING:
    from marginalia_core.workspace import Workspace

log = logging.getLogger(__name__)

# Headings inside a margin card are kept small: h1 -> h4 ... h3+ -> h6.
HEADING_BASE = 3
MAX_HEADING = 6
ANCHOR_PREFIX = "src"


def is_markdown(mime: str | None) -> bool:
    """Passages of this format render as Markdown (Markdown, Word, slides, sheets, web...)."""
    return formats.by_mime(mime).renders == "markdown"


def has_pages(mime: str | None) -> bool:
    """Passages of this format have a page to show (its original is rendered): PDFs."""
    return formats.by_mime(mime).renders == "pdf"


def anchor_id(scope: str, mid: str, n: int) -> str:
    """The id of a margin card; ``scope`` changes whenever the margin's default card does, so
    a fragment left in the URL by an earlier click cannot keep an old card open."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "", f"{scope}-{mid[:12]}")
    return f"{ANCHOR_PREFIX}-{safe}-{n}"


# ---------------------------------------------------------------------------------------------
# blocks

@dataclass
class Block:
    kind: str  # "p", "h", "li", "quote", "code", "hr", "table"
    segments: list[Segment]
    level: int = 0  # heading level; for "li", 1 when the list is ordered; "table": header rows
    plain: str = ""
    rows: list[list[list[Segment]]] = field(default_factory=list)  # "table": cells' segments


_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})\s+(.*)$")  # closing #s: markup.atx_heading_text
_BULLET_RE = re.compile(r"^ {0,3}([-*+])\s+(.*)$")
_ORDERED_RE = re.compile(r"^ {0,3}(\d{1,9})[.)]\s+(.*)$")
_QUOTE_RE = re.compile(r"^ {0,3}>\s?(.*)$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HR_RE = re.compile(r"^ {0,3}([-*_])(?:\s*\1){2,}\s*$")
CELL_SEPARATOR = " | "  # between cells in the display text (highlight offsets)


def _table_block(lines: list[str]) -> Block:
    """Markdown table lines as one block; the row before a ``|---|`` rule is the header (a
    passage cut mid-table has none)."""
    header = 0
    rows: list[list[list[Segment]]] = []
    for line in lines:
        if TABLE_RULE_RE.match(line):
            header = len(rows)
            continue
        cells = table_cells(line)
        rows.append([parse_inline(" ".join(c.split())) for c in cells])
    plain = "\n".join(CELL_SEPARATOR.join("".join(s.text for s in cell) for cell in row)
                      for row in rows)
    return Block("table", [], header, plain, rows)


def _inline_block(kind: str, text: str, level: int = 0) -> Block:
    text = " ".join(text.split())
    segments = parse_inline(text)
    return Block(kind, segments, level, "".join(s.text for s in segments))


def parse_markdown(content: str) -> list[Block]:
    """The block structure of a markdown passage (a chunk may start or end mid-block)."""
    blocks: list[Block] = []
    para: list[str] = []
    kind, level = "p", 0
    lines = content.splitlines()

    def flush() -> None:
        nonlocal para, kind, level
        if para and " ".join(para).strip():
            blocks.append(_inline_block(kind, " ".join(para), level))
        para, kind, level = [], "p", 0

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE_RE.match(line)
        if fence:
            flush()
            marker = fence.group(1)
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body.append(lines[i])
                i += 1
            code = "\n".join(body).strip("\n")
            if code:
                blocks.append(Block("code", [Segment(code, ("code",))], 0, code))
            i += 1
            continue
        if TABLE_ROW_RE.match(line):
            flush()
            table = []
            while i < len(lines) and TABLE_ROW_RE.match(lines[i]):
                table.append(lines[i])
                i += 1
            blocks.append(_table_block(table))
            continue
        if not line.strip():
            flush()
        elif _HR_RE.match(line):
            flush()
            blocks.append(Block("hr", [], 0, ""))
        elif heading := _HEADING_RE.match(line):
            flush()
            blocks.append(_inline_block("h", atx_heading_text(heading.group(2)),
                                        len(heading.group(1))))
        elif item := _BULLET_RE.match(line) or _ORDERED_RE.match(line):
            flush()
            kind, level = "li", int(item.re is _ORDERED_RE)
            para = [item.group(2)]
        elif quote := _QUOTE_RE.match(line):
            if kind != "quote":
                flush()
            kind = "quote"
            para.append(quote.group(1))
        else:
            para.append(line)  # a paragraph, or a list item's continuation line
        i += 1
    flush()
    return [b for b in blocks if b.kind == "hr" or b.plain.strip()]


def markdown_display(blocks: Sequence[Block]) -> str:
    """The text a reader sees, blocks separated by blank lines: what highlights are found in."""
    return "\n\n".join(b.plain for b in blocks if b.kind != "hr")


# ---------------------------------------------------------------------------------------------
# HTML

_STYLE_TAGS = {"strong": "strong", "em": "em", "code": "code"}
_STYLE_CLASSES = {"link": "mg-link", "img": "mg-img"}


def _wrap(text: str, styles: Sequence[str], marked: bool) -> str:
    out = html.escape(text, quote=True)
    if marked:
        out = f'<mark class="mg-hl">{out}</mark>'
    for style in reversed(styles):
        if style in _STYLE_TAGS:
            out = f"<{_STYLE_TAGS[style]}>{out}</{_STYLE_TAGS[style]}>"
        elif style in _STYLE_CLASSES:
            out = f'<span class="{_STYLE_CLASSES[style]}">{out}</span>'
    return out


def _segments_html(
    segments: Sequence[Segment], offset: int, spans: Sequence[tuple[int, int]]
) -> str:
    """Segments starting at ``offset`` of the display text, with ``spans`` of it marked."""
    out: list[str] = []
    pos = offset
    for seg in segments:
        start, end = pos, pos + len(seg.text)
        cuts = {start, end}
        for a, b in spans:
            if a < end and b > start:
                cuts.update((max(a, start), min(b, end)))
        edges = sorted(cuts)
        for a, b in zip(edges, edges[1:], strict=False):
            piece = seg.text[a - start : b - start]
            marked = any(x <= a and b <= y for x, y in spans)
            out.append(_wrap(piece, seg.styles, marked))
        pos = end
    return "".join(out)


def markdown_html(content: str, spans: Sequence[tuple[int, int]] = ()) -> str:
    """A markdown passage as sanitised HTML; ``spans`` index ``markdown_display`` of it."""
    blocks = parse_markdown(content)
    out: list[str] = []
    offset = 0
    open_list: str | None = None
    for block in blocks:
        wanted = ("ol" if block.level else "ul") if block.kind == "li" else None
        if open_list and wanted != open_list:
            out.append(f"</{open_list}>")
            open_list = None
        if wanted and not open_list:
            out.append(f"<{wanted}>")
            open_list = wanted
        if block.kind == "hr":
            out.append("<hr>")
            continue
        if block.kind == "table":
            out.append(_table_html(block, offset, spans))
            offset += len(block.plain) + 2
            continue
        inner = _segments_html(block.segments, offset, spans)
        offset += len(block.plain) + 2
        if block.kind == "h":
            level = min(MAX_HEADING, HEADING_BASE + block.level)
            out.append(f'<h{level} class="mg-h">{inner}</h{level}>')
        elif block.kind == "li":
            out.append(f"<li>{inner}</li>")
        elif block.kind == "quote":
            out.append(f"<blockquote>{inner}</blockquote>")
        elif block.kind == "code":
            out.append(f"<pre>{inner}</pre>")
        else:
            out.append(f"<p>{inner}</p>")
    if open_list:
        out.append(f"</{open_list}>")
    return "".join(out)


def _table_html(block: Block, offset: int, spans: Sequence[tuple[int, int]]) -> str:
    out = ['<div class="mg-table"><table>']
    for r, row in enumerate(block.rows):
        tag = "th" if r < block.level else "td"
        cells = []
        for c, cell in enumerate(row):
            cells.append(f"<{tag}>{_segments_html(cell, offset, spans)}</{tag}>")
            offset += sum(len(s.text) for s in cell)
            offset += len(CELL_SEPARATOR) if c < len(row) - 1 else 1
        out.append(f"<tr>{''.join(cells)}</tr>")
    out.append("</table></div>")
    return "".join(out)


def text_html(content: str, spans: Sequence[tuple[int, int]] = ()) -> str:
    """A text or PDF passage as escaped paragraphs; ``spans`` index ``fmt.display_text``."""
    display = fmt.display_text(content)
    out = []
    offset = 0
    for para in display.split("\n\n"):
        out.append(f"<p>{_segments_html([Segment(para)], offset, spans)}</p>")
        offset += len(para) + 2
    return "".join(out)


def passage_display(content: str, mime: str | None) -> str:
    """The text highlights are searched in, as the passage is shown for this kind of file."""
    if is_markdown(mime):
        return markdown_display(parse_markdown(content))
    return fmt.display_text(content)


def terms_html(content: str, mime: str | None, terms: Sequence[str]) -> str:
    """A passage as what it is (as in the margin) with the query's ``terms`` highlighted."""
    spans = fmt.term_spans(passage_display(content, mime), terms) if terms else []
    body = markdown_html(content, spans) if is_markdown(mime) else text_html(content, spans)
    return f'<div class="mg-passage">{body}</div>'


def passage_html(content: str, mime: str | None, sentences: Sequence[str] = ()) -> tuple[str, bool]:
    """(HTML of a passage as what it is, whether a cited sentence was found and highlighted)."""
    spans = fmt.highlight_spans(passage_display(content, mime), sentences) if sentences else []
    body = markdown_html(content, spans) if is_markdown(mime) else text_html(content, spans)
    return body, bool(spans)


# ---------------------------------------------------------------------------------------------
# cards

def card_label(source: dict[str, Any], mime: str | None) -> str:
    """Plain text "[1] report.pdf · p. 3 · 82 %"; no page for text and markdown files; a
    passage read from a scan says "· OCR" after its pages (its text may hold misreadings)."""
    name = " ".join(str(source.get("document_name", "")).split())
    parts = [name if source.get("n") is None else f"[{source['n']}] {name}"]
    pages = fmt.page_label(source.get("page"), source.get("page_end"), mime,
                           str(source.get("location") or ""))
    if pages:
        parts.append(pages)
    if source.get("ocr"):
        parts.append("OCR")
    if source.get("score") is not None:
        parts.append(fmt.percent(source.get("score")))
    return " · ".join(parts)


@dataclass(frozen=True)
class PageView:
    """A rendered page for a card's "See on the page": a data URI, or why there is none."""

    data_uri: str | None
    page: int
    note: str = ""


def card_html(
    source: dict[str, Any],
    *,
    anchor: str,
    mime: str | None,
    sentences: Sequence[str],
    cited: bool,
    is_open: bool,
    page_view: PageView | None = None,
    deleted: bool = False,
    page_button: str = "",
) -> str:
    """One card. ``page_button``: the key of the hidden Streamlit button its "See on the page"
    presses (the page then opens the page view in a dialog); empty for none."""
    body, highlighted = passage_html(
        source.get("content") or source.get("excerpt") or "", mime, sentences
    )
    name = str(source.get("document_name", ""))
    where = f"Passage {int(source['idx']) + 1}" if source.get("idx") is not None else "Passage"
    note = f"{where} of {name}"
    if deleted:
        note += " · document deleted: this is the passage as it was cited"
    if highlighted:
        note += " · the cited part is highlighted"
    elif not cited:
        note += " · retrieved, not cited"
    classes = ["mg-card"] + ["mg-open"] * is_open + ["mg-cited" if cited else "mg-uncited"]
    kind = "md" if is_markdown(mime) else "pdf" if has_pages(mime) else "text"
    view = ""
    if page_button:
        page = int(source.get("page") or 1)
        view = (
            f'<button type="button" class="mg-pageview" data-pv="{page_button}">'
            f"See on the page (p. {page})</button>"
        )
    elif page_view is not None:
        if page_view.data_uri:
            view = (
                f'<details class="mg-page"><summary>See on the page (p. {page_view.page})'
                f'</summary><img class="mg-page-img" alt="Page {page_view.page} of '
                f'{html.escape(name, quote=True)} with the cited passage highlighted" '
                f'src="{page_view.data_uri}"></details>'
            )
        elif page_view.note:
            view = f'<div class="mg-note">{html.escape(page_view.note)}</div>'
    number = "" if source.get("n") is None else f' data-n="{int(source["n"])}"'
    gone = '<span class="mg-gone">document deleted</span>' if deleted else ""
    return (
        f'<div class="{" ".join(classes)}" id="{anchor}"{number}>'
        f'<a class="mg-head" href="#{anchor}">{html.escape(card_label(source, mime))}{gone}</a>'
        f'<div class="mg-body"><div class="mg-passage mg-{kind}">{body}</div>'
        f'<div class="mg-note">{html.escape(note)}</div>{view}</div></div>'
    )


def group_html(
    cards: Sequence[str], *, question: str, default: bool, mid: str, live: bool = False
) -> str:
    """One answer's cards; the default group shows unless a card of another group is targeted."""
    classes = "mg-group mg-default" if default else "mg-group"
    head = ""
    if question:
        short = " ".join(question.split())
        short = short if len(short) <= 70 else short[:69].rstrip() + "…"
        head = f'<div class="mg-question">Sources for “{html.escape(short)}”</div>'
    if live:
        head += '<div class="mg-note">Retrieved passages. The answer is being written…</div>'
    if not cards:
        head += '<div class="mg-note">No passage was cited for this answer.</div>'
    safe_mid = re.sub(r"[^A-Za-z0-9_-]", "", mid)
    return f'<div class="{classes}" data-mid="{safe_mid}">{head}{"".join(cards)}</div>'


def margin_html(groups: Sequence[str]) -> str:
    return f'<div class="mg-margin">{"".join(groups)}</div>'


def source_mime(source: dict[str, Any], mimes: dict[str, str]) -> str:
    """The mime of a source's document; guessed from its name once the document is gone."""
    mime = mimes.get(str(source.get("document_id", "")))
    if mime:
        return mime
    return formats.mime_for_name(str(source.get("document_name", ""))) or "text/plain"


def first_cited(answer: str, numbers: Sequence[int]) -> int | None:
    """The number of the first valid mark in the answer: the card open after it."""
    valid = set(numbers)
    for mark in find_marks(answer):
        for n in mark.numbers:
            if n in valid:
                return n
    return None


PAGE_VIEW_FALLBACK = "The page could not be shown; the passage above is its text."
# a kept PDF up to this size rides along in the page view, so "open at this page" needs no
# server route; a larger one is offered as a download only
MAX_INLINE_PDF_BYTES = 25 * 1024 * 1024
MAX_PAGES_SEARCHED = 3


def page_view(ws: Workspace, source: dict[str, Any], sentences: Sequence[str]) -> PageView | None:
    """The cited page of a PDF source as a data URI for its card; a note when it cannot be
    rendered (the card's text stays); None when no original is kept."""
    first = int(source.get("page") or 1)
    last = max(first, int(source.get("page_end") or first))
    pages = list(range(first, min(last, first + MAX_PAGES_SEARCHED - 1) + 1))
    passage = [source.get("content") or source.get("excerpt") or ""]
    try:
        image = ws.page_image(str(source.get("document_id", "")), pages, list(sentences) or passage)
    except PageRenderError:
        log.warning("page view failed for %s p. %s", source.get("document_id"), first,
                    exc_info=True)
        return PageView(None, first, PAGE_VIEW_FALLBACK)
    if image is None:
        return None
    uri = f"data:{image.mime};base64,{base64.b64encode(image.data).decode('ascii')}"
    return PageView(uri, image.page)


PageViewer = Callable[[dict[str, Any], Sequence[str]], "PageView | None"]


def answer_group(
    answer: Message,
    *,
    question: str,
    scope: str,
    mimes: dict[str, str],
    default: bool,
    open_n: int | None = None,
    page_view: PageViewer | None = None,
    page_buttons: bool = False,
) -> str:
    """The margin group of one saved answer: a card per source, the first cited (or the chosen
    ``open_n``) open, cited sentences highlighted, PDF page views when ``page_view`` is given."""
    sources = answer.sources
    numbers = [int(s["n"]) for s in sources]
    cited = fmt.cited_sentences(answer.content, None)
    chosen = open_n if open_n in numbers else first_cited(answer.content, numbers)
    cards = []
    for source in sources:
        n = int(source["n"])
        mime = source_mime(source, mimes)
        sentences = cited.get(n, [])
        deleted = str(source.get("document_id", "")) not in mimes
        pdf = has_pages(mime) and not deleted
        view = page_view(source, sentences) if page_view and pdf else None
        cards.append(card_html(
            source,
            anchor=anchor_id(scope, answer.id, n),
            mime=mime,
            sentences=sentences,
            cited=n in cited,
            is_open=n == chosen,
            page_view=view,
            deleted=deleted,
            page_button=page_view_key(answer.id, n) if page_buttons and pdf else "",
        ))
    return group_html(cards, question=question, default=default, mid=answer.id)


def page_view_key(mid: str, n: int) -> str:
    """The key of the (hidden) Streamlit button a card's "See on the page" presses."""
    safe = re.sub(r"[^A-Za-z0-9]", "", mid[:16])
    return f"pv-{safe}-{int(n)}"


def original_link(data: bytes, page: int, label: str) -> str:
    """A link that opens a kept PDF at ``page`` in a new tab: the bytes ride in a data
    attribute, and the page's own script (``OPEN_PDF_JS``) turns them into a ``blob:`` URL with
    ``#page=N`` (browsers refuse to open ``data:`` PDFs from a link)."""
    encoded = base64.b64encode(data).decode("ascii")
    return (
        f'<a class="mg-openpdf" href="#" rel="noopener" data-page="{int(page)}" '
        f'data-pdf="{encoded}">{html.escape(label)}</a>'
    )


# Our constant script (see shell.page_script) that arms ``original_link`` links.
OPEN_PDF_JS = """
let tries = 0;
const arm = () => {
  const links = doc.querySelectorAll('a.mg-openpdf[data-pdf]');
  links.forEach((a) => {
    const raw = w.atob(a.getAttribute('data-pdf'));
    const bytes = new w.Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    const url = w.URL.createObjectURL(new w.Blob([bytes], {type: 'application/pdf'}));
    a.href = url + '#page=' + a.getAttribute('data-page');
    a.target = '_blank';
    a.removeAttribute('data-pdf');
  });
  if (!links.length && ++tries < 30) setTimeout(arm, 100);
};
arm();
"""


def live_group(sources: Sequence[dict[str, Any]], question: str, mimes: dict[str, str]) -> str:
    """The margin while an answer streams: the retrieved passages, closed, nothing cited yet."""
    cards = [
        card_html(s, anchor=anchor_id("live", "x", i), mime=source_mime(s, mimes),
                  sentences=(), cited=s.get("n") is not None, is_open=False)
        for i, s in enumerate(sources, start=1)
    ]
    return group_html(cards, question=question, default=True, mid="live", live=True)
