"""A PDF page as an image with a cited passage highlighted on it (the margin's "See on the
page").

pypdfium2 renders the page and gives every character's box; the cited sentences are found in
the page's characters compared on letters and digits only (PDF text breaks lines, hyphenates
and spaces differently from the extracted text), and each matched run of characters is
painted line by line. Rendered pages are kept in a small LRU cache by (document, page), so
opening another citation on the same page only paints new boxes.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image, ImageDraw

# About 900 px across for a Letter/A4 page: readable in the margin, small enough to send.
TARGET_WIDTH_PX = 900
MAX_SCALE = 3.0
CACHE_PAGES = 24
CACHE_VIEWS = 64  # finished images by (document, pages, sentences): a rerun re-sends, not re-paints
JPEG_QUALITY = 80
HIGHLIGHT_RGBA = (255, 164, 33, 96)
OUTLINE_RGBA = (230, 120, 0, 220)
# A sentence not found whole (it runs onto the next page) is looked for by its ends.
END_PIECE_CHARS = 60
MIN_PIECE_CHARS = 12
LINE_TOLERANCE = 0.5  # share of a character's height two boxes may differ by on one line


class PageRenderError(Exception):
    """The page could not be rendered (damaged file, page out of range)."""


@dataclass(frozen=True)
class _Page:
    image: Image.Image
    scale: float
    height_pt: float
    letters: str  # the page's letters and digits, lower case
    index: list[int]  # character index of each entry of ``letters``
    boxes: list[tuple[float, float, float, float]]  # per character: left, bottom, right, top


@dataclass(frozen=True)
class PageImage:
    """A rendered page: JPEG bytes, its size, and how many highlight boxes were painted."""

    data: bytes
    width: int
    height: int
    page: int  # 1-based
    highlighted: int
    mime: str = "image/jpeg"


def _letters(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _load(data: bytes, page_number: int) -> _Page:
    try:
        pdf = pdfium.PdfDocument(data)
    except Exception as exc:  # pdfium raises its own error types for damaged files
        raise PageRenderError(f"the PDF could not be opened ({exc})") from exc
    try:
        if not 1 <= page_number <= len(pdf):
            raise PageRenderError(f"page {page_number} is not in this PDF")
        page = pdf[page_number - 1]
        width, height = page.get_size()
        scale = min(MAX_SCALE, TARGET_WIDTH_PX / max(width, 1.0))
        image = page.render(scale=scale).to_pil().convert("RGB")
        textpage = page.get_textpage()
        letters: list[str] = []
        index: list[int] = []
        boxes: list[tuple[float, float, float, float]] = []
        for i in range(textpage.count_chars()):
            boxes.append(tuple(textpage.get_charbox(i)))
            ch = chr(pdfium_c.FPDFText_GetUnicode(textpage.raw, i) or 32).lower()
            if ch.isalnum():
                letters.append(ch)
                index.append(i)
        textpage.close()
        page.close()
        return _Page(image, scale, height, "".join(letters), index, boxes)
    except PageRenderError:
        raise
    except Exception as exc:
        raise PageRenderError(f"page {page_number} could not be rendered ({exc})") from exc
    finally:
        pdf.close()


def find_ranges(letters: str, sentences: Sequence[str]) -> list[tuple[int, int]]:
    """Ranges of ``letters`` (positions, end exclusive) where the sentences are, each found
    whole or, failing that, by its first and last ``END_PIECE_CHARS`` letters."""
    found: list[tuple[int, int]] = []
    for sentence in sentences:
        needle = _letters(sentence)
        if len(needle) < MIN_PIECE_CHARS:
            continue
        at = letters.find(needle)
        if at >= 0:
            found.append((at, at + len(needle)))
            continue
        for piece in (needle[:END_PIECE_CHARS], needle[-END_PIECE_CHARS:]):
            at = letters.find(piece)
            if at >= 0:
                found.append((at, at + len(piece)))
    return found


def _line_rects(
    boxes: Sequence[tuple[float, float, float, float]]
) -> list[tuple[float, float, float, float]]:
    """Character boxes merged into one rectangle per line (left, bottom, right, top)."""
    rects: list[list[float]] = []
    for left, bottom, right, top in boxes:
        if right <= left or top <= bottom:
            continue
        if rects:
            last = rects[-1]
            tall = max(top - bottom, last[3] - last[1])
            same_line = abs(bottom - last[1]) < tall * LINE_TOLERANCE and left >= last[0] - tall
            if same_line:
                last[0], last[1] = min(last[0], left), min(last[1], bottom)
                last[2], last[3] = max(last[2], right), max(last[3], top)
                continue
        rects.append([left, bottom, right, top])
    return [tuple(r) for r in rects]  # type: ignore[misc]


def _paint(page: _Page, ranges: Sequence[tuple[int, int]]) -> tuple[Image.Image, int]:
    image = page.image.copy().convert("RGBA")
    overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    painted = 0
    for a, b in ranges:
        first, last = page.index[a], page.index[b - 1]
        for left, bottom, right, top in _line_rects(page.boxes[first : last + 1]):
            pad = 1.5
            box = (
                (left - pad) * page.scale,
                (page.height_pt - top - pad) * page.scale,
                (right + pad) * page.scale,
                (page.height_pt - bottom + pad) * page.scale,
            )
            draw.rectangle(box, fill=HIGHLIGHT_RGBA, outline=OUTLINE_RGBA, width=1)
            painted += 1
    return Image.alpha_composite(image, overlay).convert("RGB"), painted


class PageRenderer:
    """Renders pages of stored PDFs, keeping the last ``capacity`` pages in memory."""

    def __init__(self, capacity: int = CACHE_PAGES):
        self.capacity = capacity
        self._cache: OrderedDict[tuple[str, int], _Page] = OrderedDict()
        self._views: OrderedDict[tuple[str, tuple[int, ...], tuple[str, ...]], PageImage] = (
            OrderedDict()
        )
        self._lock = threading.Lock()
        self.renders = 0  # pages rendered from the PDF (not served from the cache)

    def _page(self, key: str, data: bytes, page_number: int) -> _Page:
        with self._lock:
            cached = self._cache.get((key, page_number))
            if cached is not None:
                self._cache.move_to_end((key, page_number))
                return cached
        page = _load(data, page_number)
        with self._lock:
            self.renders += 1
            self._cache[(key, page_number)] = page
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return page

    def render(
        self,
        key: str,
        data: bytes,
        pages: Sequence[int],
        sentences: Sequence[str],
    ) -> PageImage:
        """The first of ``pages`` on which a sentence is found (else the first page), with
        the sentences highlighted. ``key`` names the document in the cache."""
        if not pages:
            raise PageRenderError("no page to show")
        view_key = (key, tuple(pages), tuple(sentences))
        with self._lock:
            done = self._views.get(view_key)
            if done is not None:
                self._views.move_to_end(view_key)
                return done
        image = self._render(key, data, pages, sentences)
        with self._lock:
            self._views[view_key] = image
            while len(self._views) > CACHE_VIEWS:
                self._views.popitem(last=False)
        return image

    def _render(
        self, key: str, data: bytes, pages: Sequence[int], sentences: Sequence[str]
    ) -> PageImage:
        chosen, ranges = None, []
        for number in pages:
            page = self._page(key, data, number)
            ranges = find_ranges(page.letters, sentences)
            if ranges:
                chosen = (number, page)
                break
        if chosen is None:
            chosen = (pages[0], self._page(key, data, pages[0]))
            ranges = []
        number, page = chosen
        image, painted = _paint(page, ranges)
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=JPEG_QUALITY, optimize=True)
        return PageImage(buffer.getvalue(), image.width, image.height, number, painted)
