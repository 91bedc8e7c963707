"""Word (.docx), PowerPoint (.pptx) and OpenDocument text (.odt) as Markdown with locations.

Word: mammoth (headings from styles, lists, tables, footnotes, endnotes and comments) into
HTML, then ``markup``'s converter; sections by heading. PowerPoint: python-pptx, one location
per slide (title, text frames, tables, groups) with its speaker notes. OpenDocument: odfpy's
element tree; sections by heading. Benchmarks/README.md says why these libraries.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from marginalia_core.ingest import markup
from marginalia_core.ingest.containers import check_archive, damaged, guarded
from marginalia_core.ingest.extraction import Extracted, ReadOptions, Unit, join_units

# mammoth: comment references become superscript marks, comments a list at the end.
DOCX_STYLE_MAP = "comment-reference => sup"
NOTES_HEADING = "Notes"
COMMENTS_HEADING = "Comments"
# a chart's data as a table: its categories (or points) kept up to this many rows
MAX_CHART_ROWS = 200

LOG = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ Word


def _label_back_matter(html: str) -> str:
    """Put a heading before mammoth's footnote list and comment list, so each is a section
    of its own ("section ‘Notes’") rather than the tail of the last one."""
    soup = markup._soup(html)
    for selector, heading in (("li[id^=footnote-], li[id^=endnote-]", NOTES_HEADING),
                              ("dt[id^=comment-]", COMMENTS_HEADING)):
        first = soup.select_one(selector)
        if first is not None and first.parent is not None:
            tag = soup.new_tag("h2")
            tag.string = heading
            first.parent.insert_before(tag)
    return str(soup)


@guarded("Word document")
def read_docx(name: str, data: bytes, options: ReadOptions) -> Extracted:
    import mammoth  # noqa: PLC0415  (imported when a Word file is read)

    check_archive(name, data, "Word document").close()
    try:
        result = mammoth.convert_to_html(io.BytesIO(data), style_map=DOCX_STYLE_MAP)
    except Exception as err:
        raise damaged(name, "Word document", err) from None
    blocks = markup.html_blocks(_label_back_matter(result.value))
    return join_units(name, options.mime, markup.sections(blocks))


# ------------------------------------------------------------------------------ PowerPoint


def _number(value: Any) -> str:
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _chart_blocks(chart: Any) -> list[str]:
    """A chart's title and data as a Markdown table (categories by series): what it shows,
    for a question about it ("What were sales in the 1st quarter?"). A deck of charts alone
    was refused as holding no text."""
    title = ""
    if chart.has_title and chart.chart_title.has_text_frame:
        title = " ".join(chart.chart_title.text_frame.text.split())
    series = list(chart.series)
    if not series:
        return []
    try:
        categories = [" ".join(str(c).split()) for c in chart.plots[0].categories]
    except (IndexError, AttributeError, KeyError):  # an XY or bubble chart: no categories
        categories = []
    values = [list(s.values) for s in series]
    count = min(max(len(v) for v in values), MAX_CHART_ROWS)
    names = [markup._escape_cell(s.name or f"Series {n}") for n, s in enumerate(series, 1)]
    rows = [["Category" if categories else "Point", *names]]
    for i in range(count):
        label = categories[i] if i < len(categories) else str(i + 1)
        rows.append([markup._escape_cell(label),
                     *[_number(v[i]) if i < len(v) else "" for v in values]])
    return [f"**Chart{': ' + title if title else ''}**", markup.markdown_table(rows)]


def _shape_blocks(shape: Any) -> list[str]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE  # noqa: PLC0415

    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        return [text for inner in shape.shapes for text in _shape_blocks(inner)]
    if getattr(shape, "has_chart", False) and shape.has_chart:
        try:
            return _chart_blocks(shape.chart)
        except Exception as err:  # a chart python-pptx cannot read: the slide's text still counts
            LOG.info("a chart could not be read: %s", type(err).__name__)
            return []
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[markup._escape_cell(cell.text) for cell in row.cells]
                for row in shape.table.rows]
        rows = [r for r in rows if any(r)]
        return [markup.markdown_table(rows)] if rows else []
    if not getattr(shape, "has_text_frame", False) or not shape.has_text_frame:
        return []
    lines = []
    for paragraph in shape.text_frame.paragraphs:
        text = " ".join(paragraph.text.split())
        if text:
            lines.append(f"{'  ' * (paragraph.level - 1)}- {text}" if paragraph.level else text)
    return ["\n".join(lines)] if lines else []


@guarded("PowerPoint presentation")
def read_pptx(name: str, data: bytes, options: ReadOptions) -> Extracted:
    """One location per slide: its title as a heading, its text and tables, its notes."""
    from pptx import Presentation  # noqa: PLC0415

    check_archive(name, data, "PowerPoint presentation").close()
    try:
        slides = list(Presentation(io.BytesIO(data)).slides)
    except Exception as err:
        raise damaged(name, "PowerPoint presentation", err) from None
    parts: list[tuple[Unit, str]] = []
    for number, slide in enumerate(slides, start=1):
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text.split()) if title_shape is not None else ""
        blocks = [f"## {title}"] if title else []
        for shape in slide.shapes:
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            blocks.extend(_shape_blocks(shape))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            text = notes.text.strip() if notes is not None else ""
            if text:
                blocks.append(f"**Speaker notes:** {' '.join(text.split())}")
        parts.append((Unit(title[:200], number), "\n\n".join(blocks)))
    return join_units(name, options.mime, parts)


# ---------------------------------------------------------------------------- OpenDocument


_ODF_SPACES = {"s": " ", "tab": "\t", "line-break": "\n"}


def _odf_inline(node: Any, notes: list[str]) -> str:
    """A paragraph's text; a footnote or endnote becomes a ``[^n]`` mark and its text goes to
    ``notes`` (shown under "Notes" at the end, as for Word)."""
    from odf import teletype  # noqa: PLC0415

    parts: list[str] = []
    for child in node.childNodes:
        if child.nodeType == child.TEXT_NODE:
            parts.append(str(child.data))
            continue
        tag = getattr(child, "qname", (None, None))[1]
        if tag == "note":
            mark, body = "", ""
            for part in child.childNodes:
                kind = getattr(part, "qname", (None, None))[1]
                if kind == "note-citation":
                    mark = " ".join(teletype.extractText(part).split())
                elif kind == "note-body":
                    body = " ".join(teletype.extractText(part).split())
            mark = mark or str(len(notes) + 1)
            notes.append(f"[^{mark}]: {body}")
            parts.append(f"[^{mark}]")
        elif tag in _ODF_SPACES:
            parts.append(_ODF_SPACES[tag])
        else:
            parts.append(_odf_inline(child, notes))
    return "".join(parts)


def _odf_text(node: Any, notes: list[str] | None = None) -> str:
    return " ".join(_odf_inline(node, [] if notes is None else notes).split())


def _odf_blocks(node: Any, out: list[markup.Block], depth: int = 0,
                notes: list[str] | None = None) -> None:
    notes = [] if notes is None else notes
    for child in node.childNodes:
        tag = getattr(child, "qname", (None, None))[1]
        if tag == "h":
            level = int(child.getAttribute("outlinelevel") or 1)
            text = _odf_text(child, notes)
            if text:
                out.append(markup.Block("h", text, min(max(level, 1), 6)))
        elif tag == "p":
            text = _odf_text(child, notes)
            if text:
                out.append(markup.Block("p", text))
        elif tag == "list":
            lines: list[str] = []
            _odf_list(child, lines, depth)
            if lines:
                out.append(markup.Block("md", "\n".join(lines)))
        elif tag == "table":
            rows = []
            for row in child.getElementsByType(_odf_type("TableRow")):
                cells = [markup._escape_cell(_odf_text(c))
                         for c in row.childNodes if getattr(c, "qname", ("", ""))[1]
                         == "table-cell"]
                if any(cells):
                    rows.append(cells)
            if rows:
                out.append(markup.Block("md", markup.markdown_table(rows)))
        elif tag in ("section", "div"):
            _odf_blocks(child, out, depth, notes)


def _odf_list(node: Any, lines: list[str], depth: int) -> None:
    for item in node.childNodes:
        for part in getattr(item, "childNodes", []):
            tag = getattr(part, "qname", (None, None))[1]
            if tag == "list":
                _odf_list(part, lines, depth + 1)
            elif tag in ("p", "h"):
                text = _odf_text(part)
                if text:
                    lines.append(f"{'  ' * depth}- {text}")


# odfpy names every namespace it meets in two process-wide dicts (odf.namespaces.nsdict and
# the class-level Element.namespaces), so a hostile file's made-up or empty namespaces would
# stay there for good, and odfpy would declare them in every document it writes after (an
# empty one as xmlns:nsN="", which is not XML). A read leaves both as it found them, one read
# at a time.
_ODF_NAMESPACES = threading.Lock()


def _odf_diagnostic(*args: Any, **_: Any) -> None:
    """odfpy prints a part it cannot parse, whole, to standard output (the CLI's NDJSON
    stream); its message goes to the log instead, without the part."""
    LOG.debug("odfpy: %s", str(args[0]).strip() if args else "")


@contextmanager
def _odf_namespaces_kept() -> Iterator[None]:
    from odf import load as odf_load  # noqa: PLC0415
    from odf import opendocument  # noqa: PLC0415
    from odf.element import Element  # noqa: PLC0415
    from odf.namespaces import nsdict  # noqa: PLC0415

    for module in (opendocument, odf_load):  # shadows the builtin for that module only
        module.print = _odf_diagnostic

    with _ODF_NAMESPACES:
        kept = [(d, dict(d)) for d in (nsdict, Element.namespaces)]
        try:
            yield
        finally:
            for d, before in kept:
                d.clear()
                d.update(before)


def _odf_type(name: str) -> Any:
    from odf import table  # noqa: PLC0415

    return getattr(table, name)


def _odf_office_text(document: Any) -> list[Any]:
    """The document's ``office:text`` element(s). odfpy's ``document.text`` is the body's first
    child, which is a whitespace node when the XML is indented (pandoc's test/odt files)."""
    return [c for c in document.body.childNodes
            if getattr(c, "qname", (None, None))[1] == "text"]


@guarded("OpenDocument text")
def read_odt(name: str, data: bytes, options: ReadOptions) -> Extracted:
    from odf import opendocument  # noqa: PLC0415

    check_archive(name, data, "OpenDocument text").close()
    blocks: list[markup.Block] = []
    notes: list[str] = []
    with _odf_namespaces_kept():
        try:
            document = opendocument.load(io.BytesIO(data))
        except Exception as err:
            raise damaged(name, "OpenDocument text", err) from None
        for body in _odf_office_text(document):
            _odf_blocks(body, blocks, notes=notes)
    if notes:
        blocks += [markup.Block("h", NOTES_HEADING, 2), markup.Block("md", "\n".join(notes))]
    return join_units(name, options.mime, markup.sections(blocks))
