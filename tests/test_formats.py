"""The format table and its readers: real files from public test suites (tests/data/formats)
indexed and found by search, and files built here with each format's own library to check what
each reader keeps (headings, lists, tables, notes, comments, slides, speaker notes, sheets and
rows, chapters in reading order, a page's main content) and how locations are named."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import document

from marginalia_core.ingest import formats
from marginalia_core.ingest.extraction import Unit
from marginalia_core.ingest.formats import extract, location_label

DATA = Path(__file__).parent / "data" / "formats"

# (file, a phrase of it asked as a question, what its location label holds)
REAL_FILES = [
    ("comments-rich-para.docx", "Some text worthy of note", "section"),
    ("notes.docx", "My note", "\u2018Notes\u2019"),
    ("txt-fit-text.pptx", "the craft of designing typefaces is called type design", "slide 1"),
    ("ph-inherit-props.pptx", "Notes in modified position and size", "slide"),
    ("inventory-table.xlsx", "Banana quantity 200", "sheet Sheet1, row"),
    ("analysis-data.csv", "Vocational school, very interested, rural residence",
     "sheet analysis-data, row"),
    ("headers.odt", "Another header, another paragraph", "section"),
    ("wasteland.epub", "April is the cruellest month, breeding lilacs out of the dead land",
     "chapter 1"),
    ("creativecommons.org.html", "Creative Commons Affiliate Network researchers activists",
     "section"),
    ("testsuite.md", "This is a block quote. It is pretty short.", "section"),
]


@pytest.fixture(scope="module")
def library(tmp_path_factory, local_embedder):
    """One library holding every real file (so each must beat the others to its top 3)."""
    from marginalia_core.config import load_settings
    from marginalia_core.workspace import Workspace

    db = tmp_path_factory.mktemp("formats") / "formats.db"
    settings = load_settings({"MARGINALIA_DB": str(db), "MARGINALIA_EMBEDDER": "local",
                                      "MARGINALIA_ANSWERER": "extractive"}, secrets={})
    ws = Workspace(settings, embedder=local_embedder)
    ends = {}
    for name, _, _ in REAL_FILES:
        ends[name] = list(ws.ingest(name, (DATA / name).read_bytes()))[-1]
    yield ws, ends
    ws.close()


@pytest.mark.parametrize("name,phrase,where", REAL_FILES, ids=[f[0] for f in REAL_FILES])
def test_a_real_file_is_indexed_and_found_in_its_top_3(library, name, phrase, where):
    ws, ends = library
    end = ends[name]
    assert end["type"] == "done", end
    assert end["document"]["mime"] == formats.by_name(name).mime
    hits = ws.search(phrase, k=3)
    mine = [h for h in hits if h.document_name == name]
    assert mine, [(h.document_name, h.location) for h in hits]
    assert where in mine[0].location


def test_every_real_file_s_original_is_kept_byte_for_byte_but_only_a_pdf_has_page_views(
        library):
    ws, ends = library
    for name, _, _ in REAL_FILES:
        doc_id = ends[name]["document"]["id"]
        assert ws.original(doc_id) == (DATA / name).read_bytes(), name
        assert ws.page_image(doc_id, [1]) is None, name  # not drawn as a page


def test_every_real_file_s_passages_render_as_markdown(library):
    from marginalia_app import passages

    ws, ends = library
    for name, _, _ in REAL_FILES:
        doc = ends[name]["document"]
        assert passages.is_markdown(doc["mime"]) and not passages.has_pages(doc["mime"])
        chunk = ws.store.document_chunks(doc["id"])[0]
        html = passages.markdown_html(chunk.content)
        assert "<script" not in html.lower()


def test_the_web_page_keeps_its_article_not_its_menus():
    text = extract("cc.html", (DATA / "creativecommons.org.html").read_bytes()).text
    assert "Creative Commons helps you legally share your knowledge" in text
    assert "function(" not in text and "<div" not in text
    assert "Skip to content" not in text  # navigation


# ------------------------------------------------------------------------------------ Word


def _docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Field trial of quince rootstocks", level=1)
    intro = document.add_paragraph("Three rootstocks were planted in spring.")
    document.add_comment(intro.runs, text="Check the planting date with the nursery.",
                         author="Reviewer", initials="RV")
    document.add_heading("Methods", level=2)
    document.add_paragraph("Soil was tested monthly", style="List Bullet")
    document.add_paragraph("Trees were watered weekly", style="List Bullet")
    document.add_heading("Results", level=2)
    table = document.add_table(rows=3, cols=2)
    for r, (a, b) in enumerate([("Rootstock", "Yield (kg)"), ("Quince A", "41"),
                                ("Quince C", "37")]):
        table.cell(r, 0).text, table.cell(r, 1).text = a, b
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_docx_keeps_headings_lists_tables_and_comments_in_sections():
    got = extract("trial.docx", _docx())
    assert got.mime == formats.DOCX_MIME
    assert "# Field trial of quince rootstocks" in got.text
    assert "- Soil was tested monthly" in got.text
    assert "| Rootstock | Yield (kg) |\n| --- | --- |\n| Quince A | 41 |" in got.text
    assert "Check the planting date with the nursery." in got.text
    names = [u.name for u in got.units]
    assert names[:3] == ["Field trial of quince rootstocks", "Methods", "Results"]
    assert "Comments" in names
    results = names.index("Results") + 1
    assert location_label("section", got.units, results, results) == "section \u2018Results\u2019"


def test_docx_footnotes_are_kept_as_notes_not_citation_marks():
    text = extract("notes.docx", (DATA / "notes.docx").read_bytes()).text
    assert "Test footnote.[^1]" in text and "[^1]: My note." in text
    assert "[1]" not in text  # a footnote number is never taken for a citation mark


# ------------------------------------------------------------------------------ PowerPoint


def _pptx(slides: int = 3) -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    for n in range(1, slides + 1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Orchard review {n}"
        slide.placeholders[1].text_frame.text = f"Point {n}: pruning keeps the crown open."
        slide.notes_slide.notes_text_frame.text = f"Say: slide {n} notes about frost."
        if n == 2:
            shape = slide.shapes.add_table(2, 2, Inches(1), Inches(4), Inches(4), Inches(1))
            cells = shape.table
            cells.cell(0, 0).text, cells.cell(0, 1).text = "Month", "Task"
            cells.cell(1, 0).text, cells.cell(1, 1).text = "March", "Graft"
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def test_pptx_has_one_location_per_slide_with_tables_and_speaker_notes():
    got = extract("review.pptx", _pptx())
    assert got.page_count == 3 and [u.number for u in got.units] == [1, 2, 3]
    assert "## Orchard review 2" in got.text
    assert "| Month | Task |\n| --- | --- |\n| March | Graft |" in got.text
    assert "**Speaker notes:** Say: slide 3 notes about frost." in got.text
    assert location_label("slide", got.units, 2, 2) == "slide 2"
    assert location_label("slide", got.units, 2, 3) == "slides 2\u20133"


# ------------------------------------------------------------------------- Excel and CSV


def _xlsx() -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.title = "Budget"
    sheet.append(["Item", "Cost", "Month"])
    for n in range(1, 60):
        sheet.append([f"Item {n}", n * 10, "March" if n % 2 else "April"])
    other = book.create_sheet("Suppliers")
    other.append(["Name", "Town"])
    other.append(["Vranja Nursery", "Dorking"])
    hidden = book.create_sheet("Scratch")
    hidden.append(["secret", "hidden sheet text"])
    hidden.sheet_state = "hidden"
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_xlsx_rows_stand_alone_with_their_header_names(workspace):
    got = extract("budget.xlsx", _xlsx())
    assert "**Item**: Item 12 · **Cost**: 120 · **Month**: April" in got.text
    assert "hidden sheet text" not in got.text
    assert got.units[0] == Unit("Budget", 2) and got.units[-1] == Unit("Suppliers", 2)
    assert location_label("sheet", got.units, 11, 39) == "sheet Budget, rows 12\u201340"
    end = list(workspace.ingest("budget.xlsx", _xlsx()))[-1]
    assert end["type"] == "done"
    assert formats.extent(end["document"]["mime"], end["document"]["page_count"],
                          got.units) == "2 sheets, 60 rows"
    chunks = workspace.store.document_chunks(end["document"]["id"])
    assert len(chunks) > 1
    assert all(c.location.startswith("sheet ") for c in chunks)
    assert chunks[0].location.startswith("sheet Budget, rows 2\u2013")
    assert chunks[-1].location.endswith("sheet Suppliers, row 2")
    hits = workspace.search("Vranja Nursery Dorking")
    assert hits[0].location.endswith("sheet Suppliers, row 2")
    from marginalia_app import presentation as fmt  # the Inspector's chunking table

    stored = workspace.document(end["document"]["id"])
    assert fmt.document_place(stored, 1, 16) == "sheet Budget, rows 2\u201317"
    assert fmt.document_place(document(mime="application/pdf", page_count=9), 3, 5) == "3\u20135"


def test_csv_sniffs_its_delimiter_and_names_the_sheet_after_the_file():
    data = b"Variety;Harvest\nVranja;October\nMeech's Prolific;November\n"
    got = extract("quinces.csv", data)
    assert got.mime == "text/csv"
    assert "**Variety**: Meech's Prolific · **Harvest**: November" in got.text
    assert location_label("sheet", got.units, 1, 2) == "sheet quinces, rows 2\u20133"


def test_a_sheet_without_a_header_row_names_columns_by_letter():
    got = extract("numbers.csv", b"1,2\n3,4\n")
    assert "**A**: 1 · **B**: 2" in got.text


# ------------------------------------------------------------------------ OpenDocument, EPUB


def _odt() -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, Note, NoteBody, NoteCitation, P

    doc = OpenDocumentText()
    doc.text.addElement(H(outlinelevel=1, text="Harvest diary"))
    frost = P(text="The first frost came early this year.")
    note = Note(noteclass="footnote", id="ftn1")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="Measured at the north wall thermometer."))
    note.addElement(body)
    frost.addElement(note)
    doc.text.addElement(frost)
    doc.text.addElement(H(outlinelevel=2, text="Yields"))
    table = Table(name="Yields")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for a, b in (("Tree", "Kg"), ("North wall", "18")):
        row = TableRow()
        for value in (a, b):
            cell = TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    doc.text.addElement(table)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def test_odt_keeps_headings_as_sections_tables_as_tables_and_notes_as_notes():
    got = extract("diary.odt", _odt())
    assert got.mime == formats.ODT_MIME
    assert [u.name for u in got.units] == ["Harvest diary", "Yields", "Notes"]
    assert "| Tree | Kg |\n| --- | --- |\n| North wall | 18 |" in got.text
    assert "early this year.[^1]" in got.text
    assert "[^1]: Measured at the north wall thermometer." in got.text


MARKDOWN = """---
title: Garden notes
---
Kept in the shed.

# Soil
Loam, mostly.

```sh
# not a heading: a comment in a code block
```

Watering
--------
At dawn.

#### Too deep to be a section
- a list item
---

## Tools ##
Spade.
"""


def test_a_slide_s_chart_is_read_as_a_table_of_its_data():
    """python-pptx's cht-charts.pptx holds one bar chart and no other text: it was refused as
    holding no text. Its categories by series are a table a question can find."""
    got = extract("cht-charts.pptx", (DATA / "cht-charts.pptx").read_bytes())
    assert got.units[0].number == 1
    assert "| Category | Series 1 | Series 2 | Series 3 |" in got.text
    assert "| Category 2 | 2.5 | 4.4 | 2 |" in got.text


def test_a_chart_python_pptx_cannot_read_leaves_the_slide_s_text(monkeypatch):
    from marginalia_core.ingest import office

    def unreadable(chart):
        raise KeyError("c:plotArea")

    monkeypatch.setattr(office, "_chart_blocks", unreadable)
    with pytest.raises(formats.EmptyFileError):  # the deck has nothing else: refused, not a crash
        extract("cht-charts.pptx", (DATA / "cht-charts.pptx").read_bytes())


def test_markdown_is_in_sections_by_heading_and_its_text_is_unchanged():
    got = extract("garden.md", MARKDOWN.encode())
    assert got.text == MARKDOWN
    assert [u.name for u in got.units] == ["", "Soil", "Watering", "Tools"]
    assert [got.text[s:].split("\n", 1)[0] for s in got.page_starts] == [
        "---", "# Soil", "Watering", "## Tools ##"]
    assert location_label("section", got.units, 1, 1) == "section opening"
    assert location_label("section", got.units, 2, 3) == "sections \u2018Soil\u2019 \u2013 \u2018Watering\u2019"


NOT_HEADINGS = """Intro.

# Real

<!--
## Commented-out old section
-->

<div>
# hash inside an html block
</div>

<pre>
# shell prompt

# after a blank line, still in pre
</pre>

- a list item that is long
  and wraps onto a second line
---

> a quote
continued lazily here
---

    # indented code

A setext heading whose text
runs over two lines
===================

Body.
"""


def test_markdown_headings_are_found_where_commonmark_finds_them():
    """Found in a sweep of pandoc's test files and probes: a heading in an HTML comment or block
    or indented code is none, and a --- under a list item or a quote is a rule."""
    got = extract("notes.md", NOT_HEADINGS.encode())
    assert [u.name for u in got.units] == [
        "", "Real", "A setext heading whose text runs over two lines"]
    assert got.text[got.page_starts[-1]:].startswith("A setext heading whose text\n")


def test_markdown_without_headings_is_one_location_like_a_text_file():
    got = extract("list.md", b"- eggs\n- flour\n\nThat is all.\n")
    assert got.page_starts == [0] and got.units == ()
    titled = extract("list.md", b"# Shopping\n\n- eggs\n- flour\n")  # one section: the whole
    assert titled.page_starts == [0] and titled.units == ()
    assert formats.extent(got.mime, got.page_count, got.units) == ""  # not "1 section"
    assert formats.extent(got.mime, 4, ()) == "4 sections"


def test_a_page_whose_headings_sit_in_its_body_keeps_them_as_sections():
    """pandoc's html-reader.html: trafilatura picks the right text but drops every heading that
    sits directly in <body> (the page was one section) and flattens inline code; the body's own
    blocks that its choice holds are kept instead."""
    got = extract("html-reader.html", (DATA / "html-reader.html").read_bytes())
    names = [u.name for u in got.units]
    assert {"Paragraphs", "Block Quotes", "Lists", "Special Characters", "Tables"} <= set(names)
    assert "This is code: `>`, `$`" in got.text
    assert "Level 2 with emphasis" in names  # the heading's *emphasis* marks are not its name


@pytest.mark.parametrize(("heading", "name"), [
    ("Level 2 with an [embedded link](/url)", "Level 2 with an embedded link"),
    ("Level 3 with *emphasis* and **strong**", "Level 3 with emphasis and strong"),
    ("**`code`** and ***both***", "code and both"),
    ("The `__init__` method and `a*b`", "The __init__ method and a*b"),
    ("snake_case_name stays, _this_ goes", "snake_case_name stays, this goes"),
    ("C\\+\\+ in 2 * 3 steps", "C++ in 2 * 3 steps"),
    ("![logo](logo.png) Release notes", "logo Release notes"),
    ("Escaped \\*stars\\* and \\_under\\_", "Escaped *stars* and _under_"),
    ("Header {#sec-2 .unnumbered}", "Header"),  # pandoc's attributes
    ("[small caps]{.smallcaps} ~~gone~~ x^2^ and [ref][r1]", "small caps gone x2 and ref"),
    ('A <span class="x">span</span> &amp; more', "A span & more"),
    ("a < b and {a, b}", "a < b and {a, b}"),
])
def test_a_section_is_named_by_its_heading_s_words_without_inline_markdown(heading, name):
    from marginalia_core.ingest.markup import heading_name

    assert heading_name(heading) == name
    got = extract("notes.md", f"Intro.\n\n## {heading}\n\nBody.\n".encode())
    assert [u.name for u in got.units] == ["", name]


def test_a_saved_page_still_leaves_its_menus_out_and_keeps_a_quote_s_attribution():
    got = extract("creativecommons.org.html",
                  (DATA / "creativecommons.org.html").read_bytes())
    assert "> Our work is to build a vibrant, usable commons" in got.text
    assert "> Ryan Merkley, CEO" in got.text  # trafilatura alone loses the <cite>
    assert "Skip to content" not in got.text


def test_an_indented_odt_keeps_its_text_and_prints_nothing(capsys):
    """pandoc's blockquote2.odt: its XML is indented, so odfpy's ``document.text`` is a
    whitespace node (the file was refused as holding no text), and odfpy's own namespace
    fix-up breaks its styles part, which odfpy printed whole onto standard output (the CLI's
    NDJSON stream)."""
    got = extract("blockquote2.odt", (DATA / "blockquote2.odt").read_bytes())
    assert got.text == "Paragraph\n\nA blockquote."
    assert capsys.readouterr().out == ""


def test_a_word_file_whose_main_part_is_not_at_the_usual_path_is_read():
    """pandoc's alternate_document_path.docx keeps its text in word/document2.xml, which
    Word finds through the package's relationships; it was refused as 'a ZIP archive'."""
    data = (DATA / "alternate_document_path.docx").read_bytes()
    assert formats.sniff_mime("alternate_document_path.docx", data) == formats.DOCX_MIME
    got = extract("alternate_document_path.docx", data)
    assert got.mime == formats.DOCX_MIME
    assert "This is *italic*, **bold**" in got.text


def test_a_plain_zip_named_docx_is_still_refused_as_a_zip():
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("notes/readme.txt", "wordprocessingml is mentioned here, main+xml is not")
    with pytest.raises(Exception, match="not a Word document .it looks like a ZIP archive"):
        extract("report.docx", out.getvalue())


def test_a_hostile_odt_leaves_odfpy_as_it_found_it():
    """odfpy keeps every namespace it meets in one process-wide dict; a file with elements in
    no namespace (or made-up ones) used to leave them there, and every ODT odfpy wrote after
    declared xmlns:nsN="" and could not be read (seen in the full suite after the fuzzing)."""
    import zipfile

    from odf.element import Element
    from odf.namespaces import nsdict

    good = _odt()
    with zipfile.ZipFile(io.BytesIO(good)) as z:
        parts = {i: z.read(i) for i in z.infolist()}
    hostile = io.BytesIO()
    with zipfile.ZipFile(hostile, "w") as z:
        for info, body in parts.items():
            if info.filename == "content.xml":
                body = body.replace(b"<office:text>", b'<office:text><plain>no namespace</plain>'
                                    b'<x:odd xmlns:x="urn:made-up">odd</x:odd>', 1)
            z.writestr(info, body)
    before = dict(nsdict), dict(Element.namespaces)
    extract("hostile.odt", hostile.getvalue())
    assert (nsdict, Element.namespaces) == before
    assert [u.name for u in extract("diary.odt", _odt()).units] == ["Harvest diary", "Yields",
                                                                     "Notes"]


def _epub() -> bytes:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("quince-book")
    book.set_title("A Quince Book")
    book.set_language("en")
    chapters = []
    for n, (title, body) in enumerate([("Planting", "Dig a wide hole in autumn."),
                                       ("Pruning", "Thin the crown in late winter."),
                                       ("Cooking", "Poach slowly until the flesh turns pink.")],
                                      start=1):
        chapter = epub.EpubHtml(title=title, file_name=f"c{n}.xhtml", lang="en")
        chapter.content = f"<html><body><h1>{title}</h1><p>{body}</p></body></html>"
        book.add_item(chapter)
        chapters.append(chapter)
    # the manifest order differs from the reading order: the spine decides
    book.spine = ["nav", chapters[2], chapters[0], chapters[1]]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


def test_epub_chapters_come_in_reading_order():
    got = extract("quince.epub", _epub())
    assert [u.name for u in got.units] == ["Cooking", "Planting", "Pruning"]
    assert location_label("chapter", got.units, 2, 2) == "chapter 2"
    assert got.text.index("Poach slowly") < got.text.index("Dig a wide hole")


# ---------------------------------------------------------------------------- the table


def test_every_format_is_one_row_with_a_reader_and_a_location_kind():
    seen: set[str] = set()
    for row in formats.FORMATS:
        assert row.location in formats.LOCATION_KINDS and row.renders in ("pdf", "markdown",
                                                                          "text")
        assert callable(row.reader) and row.extensions and row.mimes
        assert not seen & set(row.extensions), "an extension belongs to one row"
        seen |= set(row.extensions)
        assert formats.by_mime(row.mime) is row
    assert all(r.keep_original for r in formats.FORMATS)  # every upload can be downloaded
    assert formats.mime_for_name("Deck.PPTX") == formats.PPTX_MIME


def test_a_tab_separated_file_is_one_more_row_of_the_table(workspace):
    """Issue 21's "adding a format is one row plus a reader", shown: the TSV row reuses the CSV
    reader, and nothing else in the project names it (upload types, refusals, sniffing and the
    text-or-binary decision all come from the table)."""
    assert formats.by_name("stock.tsv").name == "TSV" and "tsv" in formats.UPLOAD_TYPES
    assert "TSV" in formats.upload_help()
    data = b"fruit\tquantity\tshelf\nBanana\t200\tB2\nQuince\t7\tA1\n"
    end = list(workspace.ingest("stock.tsv", data))[-1]
    assert end["type"] == "done" and end["document"]["mime"] == "text/tab-separated-values", end
    [hit] = [h for h in workspace.search("How many quinces are on the shelf?", k=3)
             if h.document_name == "stock.tsv"][:1]
    assert "**quantity**: 7" in hit.content and hit.location == "sheet stock, rows 2–3"
    refused = list(workspace.ingest("fake.tsv", b"%PDF-1.4 not a table"))[-1]
    assert refused["type"] == "error" and refused["reason"] == "mislabelled", refused


def test_location_labels_and_their_storage_round_trip():
    units = (Unit("Budget", 2), Unit("Budget", 3), Unit("Budget", 4), Unit("Costs", 2),
             Unit("Results"), Unit("Results"), Unit("Discussion"))
    assert formats.decode_units(formats.encode_units(units), len(units)) == units
    assert len(formats.encode_units([Unit("S", n) for n in range(2, 10_000)])) < 30
    assert location_label("page", (), 3, 5) == "pp. 3\u20135"
    assert location_label("page", (), 3, 3) == "p. 3"
    assert location_label("none", (), 1, 1) == ""
    assert location_label("sheet", units, 3, 4) == "sheet Budget, row 4 \u2013 sheet Costs, row 2"
    assert location_label("section", units, 5, 7) == ("sections \u2018Results\u2019 \u2013 "
                                                      "\u2018Discussion\u2019")
    assert location_label("section", (Unit(""),), 1, 1) == "section opening"
