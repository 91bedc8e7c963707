"""A tiny text-PDF writer for tests: real PDFs (Helvetica text layer, one content stream per
page) of any length, made in the test instead of stored, so a "long PDF" costs no repo space."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

LINES_PER_PAGE = 40
WORDS = ["margin", "gloss", "scribe", "vellum", "folio", "codex", "rubric", "quire", "binding", "ink", "annotation", "reader", "commentary", "manuscript", "page", "letter", "column", "library", "archive", "chapter", "verse", "note", "text"]


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_pdf(pages: Sequence[str]) -> bytes:
    """A PDF whose page ``i`` shows ``pages[i]`` (lines split on newlines)."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below
    pages_obj = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    kids = []
    for text in pages:
        lines = text.split("\n")
        ops = ["BT", "/F1 10 Tf", "14 TL", "50 760 Td"]
        for line in lines:
            ops.append(f"({_escape(line)}) '")
        ops.append("ET")
        raw = zlib.compress("\n".join(ops).encode("latin-1", "replace"))
        stream = add(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(raw) + raw
                     + b"\nendstream")
        kids.append(add(
            b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 %d 0 R >> >> /Contents %d 0 R >>"
            % (pages_obj, font, stream)
        ))
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % pages_obj
    objects[pages_obj - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, catalog, xref)
    return bytes(out)


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
