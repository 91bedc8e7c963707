"""HTML as Markdown sections: web pages, EPUB chapters, and Word documents (which mammoth turns
into HTML first).

The converter keeps what a reader of the passage needs (headings, paragraphs, lists, tables as
Markdown tables, quotes, code, footnotes) and drops what is not content (scripts, styles,
forms, images; on a web page also menus, headers, footers and sidebars). A web page's main
content is found by trafilatura; the whole body is the fallback when it finds too little.
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass
from html import unescape

from bs4 import BeautifulSoup, Comment, NavigableString, PageElement, Tag, XMLParsedAsHTMLWarning

from marginalia_core.errors import EmptyFileError
from marginalia_core.ingest.containers import check_archive, damaged, guarded
from marginalia_core.ingest.extraction import (
    Extracted,
    ReadOptions,
    Unit,
    decode_text,
    join_units,
    read_text,
)
from marginalia_core.markdown import parse_inline

# A heading of this level or above starts a new section (its location in citations).
SECTION_LEVEL = 3
MAX_HEADING_NAME = 200  # characters of a heading kept as its section's name
# trafilatura's main content is used when it keeps at least this share of the body's text
# (or this many characters); below it the page is mostly chrome or trafilatura missed it.
MIN_MAIN_CHARS = 200
MIN_MAIN_SHARE = 0.15
# The body's own blocks stand in for trafilatura's when they hold at least this share of its
# text: a block counts as main content when MAIN_SHINGLE_SHARE of its runs of MAIN_SHINGLE
# words are in trafilatura's text (a shorter block: all its words, in order).
MAIN_SHINGLE = 4
MAIN_SHINGLE_SHARE = 0.5
MIN_RESTORED_SHARE = 0.8

_NEVER = {"script", "style", "noscript", "template", "svg", "canvas", "iframe", "object",
          "embed", "form", "button", "input", "select", "textarea", "head", "title", "meta",
          "link", "img", "picture", "video", "audio", "map", "math"}
# Page furniture: dropped from web pages, kept in EPUB chapters and Word documents.
_CHROME = {"nav", "header", "footer", "aside", "menu", "dialog"}
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[^\W_]+")
# Markdown headings that start a section (levels 1 to SECTION_LEVEL): ATX ("## Setup") and
# setext (a line underlined with = or -); fenced code and YAML front matter are not read.
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*)$")  # its closing #s go in atx_heading_text (linear)
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LIST_OR_QUOTE = re.compile(r"^ {0,3}([-*+>]|\d+[.)])(\s|$)")
# an HTML block (CommonMark 1, 2 and 6-7): a comment (to "-->"), pre/script/style/textarea (to
# its closing tag), or another tag on its own line (to the next blank line)
_HTML_OPEN = re.compile(r"^ {0,3}(?:(<!--)|<(pre|script|style|textarea)\b|</?[A-Za-z][\w-]*(?:\s|/?>|$))",
                        re.IGNORECASE)
# what a heading may carry past CommonMark's inline marks, left out of its section's name:
# pandoc's attributes, bracketed spans and reference links, strike/super/subscript; HTML tags
_ATTRIBUTES = re.compile(r"\s*\{[#.][^{}]*\}\s*$|\s*\{-\}\s*$")  # pandoc's {#id .class}
_BRACKETED = re.compile(r"\[([^\]]*)\](?:\[[^\]]*\]|\{[^}]*\})")
_PANDOC_MARK = re.compile(r"(~~|\^|~)(?=\S)([^~^]{1,120}?)(?<=\S)\1(?!\w)")
_HTML_TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>")
_NOTE_ID = re.compile(r"^(footnote|endnote)-(\d+)$")


@dataclass
class Block:
    kind: str  # "h", "p", "md" (already Markdown: lists, tables, quotes, code)
    text: str
    level: int = 0

    def markdown(self) -> str:
        return f"{'#' * self.level} {self.text}" if self.kind == "h" else self.text


def _collapse(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def heading_name(text: str) -> str:
    """A heading as a citation names it ("section ‘Level 2 with emphasis’"): the text the
    margin shows for it (``markdown.parse_inline``), without the HTML tags, pandoc attributes,
    spans and marks ("{#sec-2}", "[x]{.smallcaps}", "~~x~~") a heading may also carry."""
    parts = []
    for segment in parse_inline(_ATTRIBUTES.sub("", _collapse(text)[:2 * MAX_HEADING_NAME])):
        if "code" in segment.styles:
            parts.append(segment.text)
            continue
        plain = _BRACKETED.sub(r"\1", _HTML_TAG.sub("", segment.text))
        parts.append(unescape(_PANDOC_MARK.sub(r"\2", plain)))
    return _collapse("".join(parts))[:MAX_HEADING_NAME]


def markdown_table(rows: list[list[str]]) -> str:
    """Escaped cells as a Markdown table, the first row its header, short rows padded; "" for
    none. Every reader's tables (web pages, Word, OpenDocument, PowerPoint, charts) are this."""
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * width]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows[1:]])


def _escape_cell(text: str) -> str:
    return _collapse(text).replace("|", "\\|")


class _Converter:
    def __init__(self, *, chrome: bool):
        self.drop = _NEVER | (_CHROME if chrome else set())
        self.notes: dict[str, str] = {}  # note id -> its number, as cited in the text

    # inline ------------------------------------------------------------------------------
    def inline(self, node: PageElement) -> str:
        if isinstance(node, Comment):
            return ""
        if isinstance(node, NavigableString):
            return str(node)
        if not isinstance(node, Tag):
            return ""
        name = node.name
        if name in self.drop:
            return ""
        if name == "br":
            return " "
        if name == "a":
            href = str(node.get("href") or "")
            note = _NOTE_ID.match(href.lstrip("#"))
            if note:
                number = _collapse(node.get_text()).strip("[]") or note.group(2)
                self.notes[href.lstrip("#")] = number
                return f"[^{number}]"
            if href.startswith("#") and _collapse(node.get_text()) == "\u2191":
                return ""  # mammoth's back-link from a note to its reference
        inner = "".join(self.inline(c) for c in node.children)
        if name in _HEADINGS or name in ("p", "div", "li", "td", "th", "tr", "dd", "dt"):
            return f" {inner} "
        text = _collapse(inner)
        if not text:
            return inner if inner[:1].isspace() else ""
        if name in ("strong", "b"):
            return _pad(inner, f"**{text}**")
        if name in ("em", "i", "cite"):
            return _pad(inner, f"*{text}*")
        if name in ("code", "kbd", "samp", "tt"):
            return _pad(inner, f"`{text}`")
        return inner

    # blocks ------------------------------------------------------------------------------
    def blocks(self, node: Tag) -> list[Block]:
        out: list[Block] = []
        self._walk(node, out)
        return out

    def _walk(self, node: Tag, out: list[Block]) -> None:
        run: list[str] = []

        def flush() -> None:
            text = _collapse("".join(run))
            if text:
                out.append(Block("p", text))
            run.clear()

        for child in node.children:
            if isinstance(child, Comment):
                continue
            if isinstance(child, NavigableString):
                run.append(str(child))
                continue
            if not isinstance(child, Tag) or child.name in self.drop:
                continue
            name = child.name
            if name in _HEADINGS:
                flush()
                text = _collapse(self.inline(child))
                if text:
                    out.append(Block("h", text, _HEADINGS[name]))
            elif name in ("ul", "ol"):
                flush()
                lines = self._list(child, 0)
                if lines:
                    out.append(Block("md", "\n".join(lines)))
            elif name == "table":
                flush()
                table = self._table(child)
                if table:
                    out.append(Block("md", table))
            elif name == "pre":
                flush()
                code = child.get_text().strip("\n")
                if code.strip():
                    out.append(Block("md", f"```\n{code}\n```"))
            elif name == "blockquote":
                flush()
                inner = self.blocks(child)
                if inner:
                    quoted = "\n>\n".join(
                        "\n".join(f"> {line}" for line in b.markdown().splitlines())
                        for b in inner)
                    out.append(Block("md", quoted))
            elif name == "dt":
                flush()
                text = _collapse(self.inline(child))
                if text:
                    out.append(Block("p", f"**{text}**"))
            elif _is_block(child):
                flush()
                self._walk(child, out)
            else:
                run.append(self.inline(child))
        flush()

    def _list(self, node: Tag, depth: int) -> list[str]:
        lines: list[str] = []
        ordered = node.name == "ol"
        try:
            number = int(str(node.get("start") or 1))
        except ValueError:
            number = 1
        for item in node.find_all("li", recursive=False):
            nested = [c for c in item.children if isinstance(c, Tag) and c.name in ("ul", "ol")]
            text = _collapse("".join(self.inline(c) for c in item.children if c not in nested))
            note = _NOTE_ID.match(str(item.get("id") or ""))
            if note and text:
                number_shown = self.notes.get(note.group(0), note.group(2))
                lines.append(f"[^{number_shown}]: {text}")
            elif text:
                marker = f"{number}." if ordered else "-"
                lines.append(f"{'  ' * depth}{marker} {text}")
            for sub in nested:
                lines.extend(self._list(sub, depth + 1))
            number += 1
        return lines

    def _table(self, table: Tag) -> str:
        rows: list[list[str]] = []
        for tr in table.find_all("tr"):
            if tr.find_parent("table") is not table:
                continue  # a nested table's row: its text is in its cell already
            cells = [_escape_cell(self.inline(c)) for c in tr.find_all(["td", "th"],
                                                                        recursive=False)]
            if any(cells):
                rows.append(cells)
        return markdown_table(rows)


_INLINE_TAGS = {"a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em", "i", "kbd",
                "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time", "u",
                "var", "wbr", "del", "ins", "font", "tt", "label", "big", "strike", "br"}


def _is_block(tag: Tag) -> bool:
    return tag.name not in _INLINE_TAGS


def _pad(raw: str, marked: str) -> str:
    """Keep the spaces around an inline element outside its Markdown markers."""
    lead = " " if raw[:1].isspace() else ""
    trail = " " if raw[-1:].isspace() else ""
    return f"{lead}{marked}{trail}"


def _soup(html: str) -> BeautifulSoup:
    with warnings.catch_warnings():  # XHTML (EPUB, mammoth) is read as HTML on purpose
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        return BeautifulSoup(html, "lxml")


def html_blocks(html: str, *, chrome: bool = False) -> list[Block]:
    """The Markdown blocks of an HTML document (``chrome``: drop menus, headers, footers)."""
    soup = _soup(html)
    root = soup.body or soup
    converter = _Converter(chrome=chrome)
    return converter.blocks(root)


def sections(blocks: list[Block], *, title: str = "") -> list[tuple[Unit, str]]:
    """Blocks cut into sections at headings of level <= SECTION_LEVEL, each named by its
    heading (the text before the first heading is the opening, named ``title`` if given)."""
    out: list[tuple[Unit, list[str]]] = [(Unit(title), [])]
    for block in blocks:
        if block.kind == "h" and block.level <= SECTION_LEVEL:
            out.append((Unit(heading_name(block.text)), []))
        out[-1][1].append(block.markdown())
    return [(unit, "\n\n".join(parts)) for unit, parts in out if parts]


def markdown_text(blocks: list[Block]) -> str:
    return "\n\n".join(b.markdown() for b in blocks)


# ------------------------------------------------------------------------------- Markdown


def read_markdown(name: str, data: bytes, options: ReadOptions) -> Extracted:
    """A Markdown file, its text unchanged, in sections by heading, so a citation names the
    section ("section ‘Install’") as it does for Word, OpenDocument and web pages."""
    plain = read_text(name, data, options)
    starts, units = markdown_sections(plain.text)
    if len(starts) < 2:
        return plain  # no heading, or one over the whole text: one location, as a text file
    return Extracted(text=plain.text, mime=plain.mime, page_starts=starts,
                     page_count=len(starts), units=tuple(units))


def atx_heading_text(raw: str) -> str:
    """An ATX heading's text without its optional closing sequence ("## Tools ##"), found in
    Python: a regex for it backtracks (a heading padded with 2,000 spaces took seconds)."""
    text = raw.strip()
    bare = text.rstrip("#")
    return bare.rstrip() if bare != text and (not bare or bare[-1] in " \t") else text


def markdown_sections(text: str) -> tuple[list[int], list[Unit]]:
    """(start offsets, units) of ``text``'s sections: one per heading of level <=
    SECTION_LEVEL, plus the opening before the first one if it holds any text. As CommonMark
    reads it: not in fenced code, HTML blocks or comments, YAML front matter or indented code;
    a setext underline only under a paragraph (under a list item or quote it is a rule)."""
    starts: list[int] = []
    units: list[Unit] = []
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    fence = ""
    closes = ""  # what ends the HTML block or comment we are in ("" at a blank line)
    in_html = False
    front = bool(lines) and lines[0].rstrip() == "---"
    para: list[int] = []  # the lines of the paragraph so far (a setext heading's text)
    contained = False  # inside a list item or block quote, up to the next blank line
    for i, raw in enumerate(lines):
        line = raw.rstrip("\r\n")
        if front:  # YAML front matter: up to the closing --- or ...
            if i > 0 and line.rstrip() in ("---", "..."):
                front = False
            continue
        if in_html:
            if (closes and closes in line.lower()) or (not closes and not line.strip()):
                in_html = False
            para = []
            continue
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            continue
        if opened:
            fence, para = opened.group(1), []
            continue
        tag = _HTML_OPEN.match(line)
        if tag and not para:
            closes = ("-->" if tag.group(1) else
                      f"</{tag.group(2).lower()}>" if tag.group(2) else "")
            in_html = not (closes and closes in line[tag.end():].lower())
            continue
        if not line.strip():
            para, contained = [], False
            continue
        atx = _ATX.match(line)
        setext = _SETEXT.match(line) if para and not contained else None
        if atx or setext:
            start = offsets[i] if atx else offsets[para[0]]
            level = (len(atx.group(1)) if atx
                     else 1 if setext and setext.group(1)[0] == "=" else 2)
            name = heading_name(atx_heading_text(atx.group(2)) if atx
                                else " ".join(lines[j] for j in para))
            if level <= SECTION_LEVEL and name:
                starts.append(start)
                units.append(Unit(name))
            para = []
        elif _LIST_OR_QUOTE.match(line):
            para, contained = [], True
        elif not para and line.startswith(("    ", "\t")):
            pass  # indented code
        elif not contained:
            para.append(i)
    if not starts or text[:starts[0]].strip():
        starts.insert(0, 0)
        units.insert(0, Unit(""))
    return starts, units


# ------------------------------------------------------------------------------- web pages


def _page_title(soup: BeautifulSoup) -> str:
    title = soup.title.get_text() if soup.title else ""
    return _collapse(title)[:MAX_HEADING_NAME]


def main_content(html: str) -> tuple[str, list[Block]]:
    """(title, blocks) of a web page's main content: trafilatura's choice of the article,
    or the whole body without menus, headers and footers when it keeps too little."""
    import trafilatura  # noqa: PLC0415  (heavy: imported when a page is read)

    soup = _soup(html)
    title = _page_title(soup)
    everything = html_blocks(html, chrome=True)
    body_chars = sum(len(b.text) for b in everything)
    try:
        main = trafilatura.extract(html, output_format="html", include_tables=True,
                                   include_formatting=True, include_links=False,
                                   include_images=False, include_comments=False,
                                   favor_recall=True, deduplicate=False)
    except Exception:  # a page trafilatura cannot parse: the body is read instead
        main = None
    if main and body_chars:  # with no text outside menus and footers, what it kept is those
        blocks = html_blocks(main)
        chars = sum(len(b.text) for b in blocks)
        if chars >= min(MIN_MAIN_CHARS, body_chars) and chars >= MIN_MAIN_SHARE * body_chars:
            restored = _held_by(blocks, everything)
            if sum(len(b.text) for b in restored) >= MIN_RESTORED_SHARE * chars:
                return title, restored
            return title, blocks
    return title, everything


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _held_by(main: list[Block], everything: list[Block]) -> list[Block]:
    """The body's own blocks that trafilatura's main content holds, under the headings of the
    sections they are in. trafilatura drops headings that sit directly in <body> (pandoc's
    HTML, many hand-written pages) and flattens or loses lists; the body's blocks keep both,
    while trafilatura still decides what is the article and what is furniture."""
    main_words = _words(" ".join(b.text for b in main))
    joined = f" {' '.join(main_words)} "
    runs = {tuple(main_words[i:i + MAIN_SHINGLE]) for i in range(len(main_words))}

    def held(block: Block) -> bool:
        words = _words(block.text)
        if len(words) < MAIN_SHINGLE:
            return bool(words) and f" {' '.join(words)} " in joined
        own = [tuple(words[i:i + MAIN_SHINGLE]) for i in range(len(words) - MAIN_SHINGLE + 1)]
        return sum(run in runs for run in own) >= MAIN_SHINGLE_SHARE * len(own)

    keep = [b.kind != "h" and held(b) for b in everything]
    for i, block in enumerate(everything):  # a heading stays when its section kept something
        if block.kind != "h":
            continue
        for j in range(i + 1, len(everything)):
            other = everything[j]
            if other.kind == "h" and other.level <= block.level:
                break
            if keep[j] and other.kind != "h":
                keep[i] = True
                break
    return [b for b, k in zip(everything, keep) if k]


@guarded("web page")
def read_html(name: str, data: bytes, options: ReadOptions) -> Extracted:
    """An HTML file or fetched web page: its main content, in sections by heading."""
    html = decode_text(name, data)
    title, blocks = main_content(html)
    if title and not any(b.kind == "h" and b.level == 1 for b in blocks):
        blocks.insert(0, Block("h", title, 1))
    if not blocks:
        raise EmptyFileError(f"{name} has no readable text (only menus, scripts or images).")
    return join_units(name, options.mime, sections(blocks))


# ------------------------------------------------------------------------------------ EPUB


@guarded("EPUB book")
def read_epub(name: str, data: bytes, options: ReadOptions) -> Extracted:
    """An EPUB book: one location per chapter (spine document with text), in reading order."""
    from ebooklib import ITEM_DOCUMENT, epub  # noqa: PLC0415

    check_archive(name, data, "EPUB book").close()
    try:
        book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
    except Exception as err:
        raise damaged(name, "EPUB book", err) from None
    parts: list[tuple[Unit, str]] = []
    for item_id, _linear in book.spine:
        item = book.get_item_with_id(item_id)
        if item is None or item.get_type() != ITEM_DOCUMENT or isinstance(item, epub.EpubNav):
            continue  # the table of contents is not a chapter
        blocks = html_blocks(item.get_content().decode("utf-8", "replace"))
        text = markdown_text(blocks)
        if not text.strip():
            continue
        heading = next((b.text for b in blocks if b.kind == "h"), "")
        parts.append((Unit(heading_name(heading), len(parts) + 1), text))
    return join_units(name, options.mime, parts)
