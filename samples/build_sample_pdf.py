"""Build samples/caring-for-old-books.pdf, the demo PDF, with nothing but the standard library.

Headings are questions so that each ends a sentence in the extracted text (PDF text has no
blank lines between a heading and its paragraph). The text below is the source of truth; run ``python samples/build_sample_pdf.py`` after editing
it. The PDF uses the built-in Helvetica fonts (nothing embedded), one text object per page, so
pypdf extracts it exactly and every passage knows its page.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

OUT = Path(__file__).with_name("caring-for-old-books.pdf")
TITLE = "How do you care for old books?"

# (heading, paragraphs); "\f" starts a new page
SECTIONS: list[tuple[str, list[str]]] = [
    (
        "",
        [
            "Old books last for centuries when they are kept in steady, moderate conditions and "
            "handled with a little care. Most damage comes from ordinary causes: light, damp, "
            "heat, dust, insects and well-meant repairs. This short guide covers what anyone "
            "can do at home without special tools.",
        ],
    ),
    (
        "How should I handle an old book?",
        [
            "Wash and dry your hands before handling an old book; clean, dry hands are better "
            "than cotton gloves, which make it easy to tear a fragile page. Never pull a book "
            "off the shelf by the top of its spine. Push the neighbouring books back a little "
            "and take the book by the middle of its spine instead.",
            "Support an old book when you open it, for example on a cushion or a folded towel, "
            "and do not force it to lie flat. A binding that cracks when it is opened too far "
            "rarely recovers. Turn pages from the upper corner, slowly.",
        ],
    ),
    (
        "Where should old books be kept?",
        [
            "Keep books upright on the shelf, supported by bookends so they do not lean, or lay "
            "very large books flat. A stable, cool room is best: about 16 to 20 degrees Celsius "
            "with a relative humidity between 40 and 55 percent. Rapid swings of temperature "
            "and humidity do more harm than a slightly warm room.",
            "Avoid attics, basements and outside walls, where damp and heat collect. Keep books "
            "out of direct sunlight, which fades covers and makes paper brittle. Leave a little "
            "space behind the shelf so that air can move, because still, damp air invites "
            "mould.",
        ],
    ),
    (
        "\fHow do I clean and mend a book?",
        [
            "Remove dust with a soft, dry brush, working from the spine towards the edge of the "
            "pages while holding the book closed. Never use water, household cleaners or an "
            "eraser on printed pages.",
            "Do not use adhesive tape on a torn page. Ordinary tape yellows, its glue soaks into "
            "the paper and it is very hard to remove later. Keep a loose page in place with a "
            "sheet of acid-free paper, or tie a broken book with cotton tape, and ask a book "
            "conservator about a proper repair.",
        ],
    ),
    (
        "What about mould and insects?",
        [
            "A musty smell, soft spots or fuzzy patches mean mould. Put the book in a paper bag, "
            "away from other books, move it to a dry place and let it dry slowly. Do not brush "
            "active mould indoors, because the spores spread.",
            "Small holes, fine powder or tunnels in the pages are signs of insects. Wrap the "
            "book and show it to a conservator before putting it back on the shelf.",
        ],
    ),
    (
        "Can I write in an old book?",
        [
            "If you want to leave marginalia of your own, use a soft pencil and write lightly. "
            "Pencil can be erased and does not bleed through the paper. Avoid ink, highlighters "
            "and sticky notes: their adhesive leaves residue, and highlighter ink fades and "
            "stains. Loose slips of acid-free paper are the safest notes of all.",
        ],
    ),
]

PAGE_W, PAGE_H = 612, 792  # US Letter, points
MARGIN = 72
BODY_SIZE, HEAD_SIZE, TITLE_SIZE = 11, 14, 20
LEADING = 15
WRAP = 84  # characters per body line at 11 pt Helvetica


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def _pages() -> list[list[tuple[str, int, str]]]:
    """Lines per page as (font, size, text)."""
    pages: list[list[tuple[str, int, str]]] = [[("F2", TITLE_SIZE, TITLE), ("F1", BODY_SIZE, "")]]
    for heading, paragraphs in SECTIONS:
        if heading.startswith("\f"):
            pages.append([])
            heading = heading[1:]
        lines = pages[-1]
        if heading:
            lines.append(("F2", HEAD_SIZE, heading))
        for paragraph in paragraphs:
            for line in textwrap.wrap(paragraph, WRAP):
                lines.append(("F1", BODY_SIZE, line))
            lines.append(("F1", BODY_SIZE, ""))
    return pages


def _content(lines: list[tuple[str, int, str]], number: int) -> bytes:
    ops = ["BT", f"{MARGIN} {PAGE_H - MARGIN} Td"]
    current = None
    first = True
    for font, size, text in lines:
        if (font, size) != current:
            ops.append(f"/{font} {size} Tf")
            current = (font, size)
        step = LEADING + (8 if size == HEAD_SIZE else 0) + (10 if size == TITLE_SIZE else 0)
        if not first:
            ops.append(f"0 -{step} Td")
        first = False
        if text:
            ops.append(f"{_pdf_string(text)} Tj")
    ops.append("ET")
    ops += ["BT", "/F1 9 Tf", f"{PAGE_W / 2 - 4:.0f} 40 Td", f"({number}) Tj", "ET"]
    return "\n".join(ops).encode("latin-1")


def build() -> bytes:
    pages = _pages()
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below
    pages_obj = add(b"")
    regular = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    bold = add(
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>"
    )
    kids = []
    for number, lines in enumerate(pages, start=1):
        stream = _content(lines, number)
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        page = add(
            (
                f"<< /Type /Page /Parent {pages_obj} 0 R /MediaBox [0 0 {PAGE_W} {PAGE_H}] "
                f"/Resources << /Font << /F1 {regular} 0 R /F2 {bold} 0 R >> >> "
                f"/Contents {content} 0 R >>"
            ).encode()
        )
        kids.append(page)
    objects[catalog - 1] = f"<< /Type /Catalog /Pages {pages_obj} 0 R >>".encode()
    objects[pages_obj - 1] = (
        f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>"
    ).encode()
    info = add(f"<< /Title {_pdf_string(TITLE)} /Producer (Marginalia samples) >>".encode())

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root {catalog} 0 R /Info {info} 0 R >>\n"
        f"startxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)


if __name__ == "__main__":
    OUT.write_bytes(build())
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")
