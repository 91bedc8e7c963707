"""The one tiny PDF writer for tests and benchmarks: real PDFs made in the test instead of
stored, so a "long PDF" costs no repo space and a test can print exactly what it needs.

A page is either a string (body lines, split on newlines, from the top-left margin down) or a
sequence of :data:`Item` s, each drawn where told, so a test can print the running heads, stamps
and line numbers a layout tool leaves, or words set apart with no space characters between them
(the text layer of typeset books, which pypdf reads run together).
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Sequence

# (x, y, font size, text) in PDF points, origin bottom-left of a US Letter page
Item = tuple[float, float, float, str]
Page = str | Sequence[Item]
PAGE_WIDTH, PAGE_HEIGHT = 612, 792
# A string page's layout: 10 pt lines every 14 pt from (50, 760).
TEXT_LEFT, TEXT_TOP, TEXT_LEADING, TEXT_SIZE = 50, 760, 14, 10
LINES_PER_PAGE = 40
# Standard-14 fonts only (no font file to embed); Courier's glyphs are all 0.6 em wide, so a
# test can compute where a word ends without a metrics table.
FONTS = ("Helvetica", "Courier")
COURIER_ADVANCE_EM = 0.6
WORDS = ["margin", "gloss", "scribe", "vellum", "folio", "codex", "rubric", "quire", "binding",
         "ink", "annotation", "reader", "commentary", "manuscript", "page", "letter", "column",
         "library", "archive", "chapter", "verse", "note", "text"]


def pdf_string(s: str) -> bytes:
    raw = s.encode("cp1252", "replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def lines_page(lines: Sequence[str], *, top: float = 725, leading: float = 17,
               size: float = 10, x: float = 72) -> list[Item]:
    """Body lines from ``top`` down, one every ``leading`` points (blank lines skip a row)."""
    return [(x, top - leading * i, size, line) for i, line in enumerate(lines) if line]


def _items(page: Page) -> Sequence[Item]:
    if isinstance(page, str):
        return lines_page(page.split("\n"), top=TEXT_TOP, leading=TEXT_LEADING,
                          size=TEXT_SIZE, x=TEXT_LEFT)
    return page


def page_content(items: Sequence[Item]) -> bytes:
    return b"\n".join(b"BT /F1 %g Tf %g %g Td " % (size, x, y) + pdf_string(text) + b" Tj ET"
                      for x, y, size, text in items)


def text_pdf(pages: Sequence[Page], *, font: str = "Helvetica") -> bytes:
    """A PDF whose page i draws ``pages[i]`` (a string's lines, or items in the order given,
    which is the order a text extractor reads them) in ``font``."""
    if font not in FONTS:
        raise ValueError(f"font must be one of {FONTS}")
    objs: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"",
                         b"<< /Type /Font /Subtype /Type1 /BaseFont /%s "
                         b"/Encoding /WinAnsiEncoding >>" % font.encode()]
    kids = []
    for page in pages:
        packed = zlib.compress(page_content(_items(page)))
        objs.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed
                    + b"\nendstream")
        objs.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources "
                    b"<< /Font << /F1 3 0 R >> >> /Contents %d 0 R >>"
                    % (PAGE_WIDTH, PAGE_HEIGHT, len(objs)))
        kids.append(len(objs))
    objs[1] = (b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids)
               + b"] /Count %d >>" % len(kids))
    return serialize(objs)


def serialize(objs: Sequence[bytes | None]) -> bytes:
    """Objects 1..n (object 1 the catalog) as a PDF file with a correct cross-reference table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        assert body is not None, f"object {i} was never filled in"
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % i + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
              % (len(objs) + 1, xref))
    return out.getvalue()


def set_apart(words: Sequence[str], *, x: float, y: float, size: float,
              gap_em: float) -> list[Item]:
    """One Courier line whose words are separate text runs ``gap_em`` apart, with no space
    character between them (as layout tools position justified words)."""
    items: list[Item] = []
    for word in words:
        items.append((x, y, size, word))
        x += (len(word) * COURIER_ADVANCE_EM + gap_em) * size
    return items


def book_pages(count: int, *, lines: int = LINES_PER_PAGE) -> list[str]:
    """``count`` pages of varied prose; page ``n`` says its own number, so a search can tell
    pages apart."""
    pages = []
    for n in range(1, count + 1):
        rows = []
        for i in range(lines):
            words = [WORDS[(n * 7 + i * 3 + k) % len(WORDS)] for k in range(11)]
            rows.append(f"Page {n} line {i}: " + " ".join(words) + ".")
        pages.append("\n".join(rows))
    return pages


def long_pdf(count: int) -> bytes:
    return text_pdf(book_pages(count))


def outline_pdf(lines: Sequence[str], *, size: int = 36, unit: float = 0.5) -> bytes:
    """One page whose text is drawn as filled shapes, with no font and no image: what a layout
    tool's "convert text to outlines" leaves (nothing for a text extractor). Each line is drawn
    with Pillow's built-in font at ``size`` pixels, and every run of dark pixels becomes a
    ``unit``-point rectangle; each line is its own path object."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=size)
    paths = []
    top = PAGE_HEIGHT - 72.0
    for line in lines:
        left, upper, right, lower = font.getbbox(line)
        image = Image.new("1", (right + 4, lower + 4), 1)
        ImageDraw.Draw(image).text((2, 2), line, font=font, fill=0)
        width, height = image.size
        pixels = image.load()
        rects = []
        for row in range(height):
            col = 0
            while col < width:
                if pixels[col, row] == 0:
                    start = col
                    while col < width and pixels[col, row] == 0:
                        col += 1
                    rects.append(b"%.2f %.2f %.2f %.2f re" % (
                        72 + start * unit, top - (row + 1) * unit, (col - start) * unit, unit))
                col += 1
        paths.append(b"\n".join(rects) + b"\nf")
        top -= height * unit + 8
    packed = zlib.compress(b"0 g\n" + b"\n".join(paths))
    objs: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed
        + b"\nendstream",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources << >> /Contents 3 0 R >>"
        % (PAGE_WIDTH, PAGE_HEIGHT),
    ]
    return serialize(objs)
