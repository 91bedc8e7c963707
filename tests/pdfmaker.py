"""A tiny PDF writer for tests and benchmarks: pages of Helvetica text drawn where told, so a
test can print exactly the running heads, stamps and line numbers a layout tool leaves."""

from __future__ import annotations

import io
import zlib
from collections.abc import Sequence

# (x, y, font size, text) in PDF points, origin bottom-left of a US Letter page
Item = tuple[float, float, float, str]
PAGE_WIDTH, PAGE_HEIGHT = 612, 792


def pdf_string(s: str) -> bytes:
    raw = s.encode("cp1252", "replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def page_content(items: Sequence[Item]) -> bytes:
    return b"\n".join(b"BT /F1 %g Tf %g %g Td " % (size, x, y) + pdf_string(text) + b" Tj ET"
                      for x, y, size, text in items)


def text_pdf(pages: Sequence[Sequence[Item]]) -> bytes:
    """A PDF whose page i draws ``pages[i]``'s items, in that order (which is the order a text
    extractor reads them)."""
    objs: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"",
                         b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica "
                         b"/Encoding /WinAnsiEncoding >>"]
    kids = []
    for items in pages:
        packed = zlib.compress(page_content(items))
        objs.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed
                    + b"\nendstream")
        objs.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources "
                    b"<< /Font << /F1 3 0 R >> >> /Contents %d 0 R >>"
                    % (PAGE_WIDTH, PAGE_HEIGHT, len(objs)))
        kids.append(len(objs))
    objs[1] = (b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids)
               + b"] /Count %d >>" % len(kids))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % i + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
              % (len(objs) + 1, xref))
    return out.getvalue()


def lines_page(lines: Sequence[str], *, top: float = 725, leading: float = 17,
               size: float = 10, x: float = 72) -> list[Item]:
    """Body lines from ``top`` down, one every ``leading`` points (blank lines skip a row)."""
    return [(x, top - leading * i, size, line) for i, line in enumerate(lines) if line]
