"""Extraction against the real eval PDFs (driven by their MANIFEST) and crafted text files."""

from __future__ import annotations

import codecs
import csv
import io
import logging
import random
import re
from pathlib import Path

import pytest
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, NameObject

from marginalia_core.errors import (
    BinaryFileError,
    CorruptFileError,
    EmptyFileError,
    EncodingError,
    EncryptedError,
    ExtractionError,
    MislabelledFileError,
    NoTextLayerError,
    TooLargeError,
    UnsupportedTypeError,
    WrongPasswordError,
)
from marginalia_core.ingest import extraction
from marginalia_core.ingest.extraction import (
    MARKDOWN_MIME,
    PDF_MIME,
    TEXT_MIME,
    Extracted,
)
from marginalia_core.ingest.formats import extract, sniff_mime

PDF_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "eval" / "pdfs"
MANIFEST = PDF_DIR / "MANIFEST.tsv"
needs_pdfs = pytest.mark.skipif(
    not MANIFEST.is_file(), reason=f"eval PDFs not present at {PDF_DIR} (shared/eval/pdfs)"
)

# pypdf quirk: this file's *owner* password is empty, so it opens without the user password
# (pypdf's decrypt("") reports OWNER_PASSWORD). Any password then "works".
OPENS_WITHOUT_PASSWORD = {"pypdf__r6-user-password.pdf"}
_PASSWORD = re.compile(r'(?:password|pw) "([^"]+)"')


def _manifest() -> list[dict[str, str]]:
    if not MANIFEST.is_file():
        return []
    with MANIFEST.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


ROWS = _manifest()
ROW_IDS = [row["file"] for row in ROWS] or ["no-manifest"]


def _load(row: dict[str, str]) -> bytes:
    return (PDF_DIR / row["file"]).read_bytes()


def _password(row: dict[str, str]) -> str | None:
    match = _PASSWORD.search(row["why_interesting"])
    return match.group(1) if match else None


def _check_shape(result: Extracted, row: dict[str, str]) -> None:
    pages = int(row["pages"])
    assert result.mime == PDF_MIME
    assert result.page_count == pages
    assert len(result.page_starts) == pages
    assert result.page_starts[0] == 0
    assert result.page_starts == sorted(result.page_starts)
    assert all(0 <= s <= len(result.text) for s in result.page_starts)
    assert result.text == result.text.strip()
    assert "\n\n\n" not in result.text and "  " not in result.text
    # Normalization only trims whitespace/ligatures, so the size stays close to pypdf's.
    expected, joins = int(row["pypdf_text_chars"]), 2 * (pages - 1)
    assert 0.85 * expected - 5 <= len(result.text) <= expected + joins + 10


@needs_pdfs
@pytest.mark.parametrize("row", ROWS or [None], ids=ROW_IDS)
def test_eval_pdf_without_password(row):
    data = _load(row)
    name = row["file"]
    if row["encrypted"] == "True" and _password(row) and name not in OPENS_WITHOUT_PASSWORD:
        with pytest.raises(EncryptedError) as err:
            extract(name, data)
        assert type(err.value) is EncryptedError
        assert name in str(err.value) and "password" in str(err.value)
    elif row["errors"]:  # pypdf cannot open it at all (unreadablemetadata)
        with pytest.raises(CorruptFileError) as err:
            extract(name, data)
        assert name in str(err.value) and "damaged" in str(err.value)
    elif row["pypdf_text_chars"] == "0":
        with pytest.raises(NoTextLayerError) as err:
            extract(name, data)
        assert "OCR" in str(err.value)
    else:
        _check_shape(extract(name, data), row)


@needs_pdfs
@pytest.mark.parametrize(
    "row", [r for r in ROWS if _password(r)] or [None], ids=lambda r: r["file"] if r else "none"
)
def test_eval_pdf_with_password(row):
    name, data, password = row["file"], _load(row), _password(row)
    result = extract(name, data, password=password)
    _check_shape(result, row)
    if name in OPENS_WITHOUT_PASSWORD:
        assert extract(name, data, password="not-it").text == result.text
    else:
        with pytest.raises(WrongPasswordError) as err:
            extract(name, data, password="not-it")
        assert err.value.reason == "wrong_password"


@needs_pdfs
def test_owner_password_only_pdf_opens_without_password():
    [row] = [r for r in ROWS if "owner-password only" in r["why_interesting"]]
    result = extract(row["file"], _load(row))
    assert "pdf encryption test" in result.text


@needs_pdfs
def test_multilang_text():
    text = extract("multilang.pdf", (PDF_DIR / "pypdf__multilang.pdf").read_bytes()).text
    for phrase in ("Hello World", "Привет, мир", "مرحبا بالعالم", "你好世界", "สวัสดีชาวโลก"):
        assert phrase in text


@needs_pdfs
def test_multipage_offsets_point_at_each_page():
    data = (PDF_DIR / "sf__pdflatex-4-pages.pdf").read_bytes()
    result = extract("four.pdf", data)
    starts = result.page_starts
    for i, start in enumerate(starts):
        end = starts[i + 1] - 2 if i + 1 < len(starts) else len(result.text)
        page = result.text[start:end]
        assert page and page == page.strip()
        if i + 1 < len(starts):
            assert result.text[end : starts[i + 1]] == "\n\n"  # pages joined by a blank line


@needs_pdfs
def test_short_real_text_is_not_mistaken_for_a_scan():
    for name in ("sf__habibi.pdf", "sf__annotated_pdf.pdf", "pypdf__issue-297.pdf"):
        assert extract(name, (PDF_DIR / name).read_bytes()).text


@needs_pdfs
def test_pypdf_warnings_are_silenced(caplog):
    caplog.set_level(logging.WARNING)
    extract("broken-xref.pdf", (PDF_DIR / "pypdf__issue-297.pdf").read_bytes())
    assert not [r for r in caplog.records if r.name.startswith("pypdf")]


@needs_pdfs
def test_truncated_pdf_is_corrupt():
    data = (PDF_DIR / "sf__pdflatex-4-pages.pdf").read_bytes()
    for fraction in (0.1, 0.5, 0.95):
        with pytest.raises(CorruptFileError) as err:
            extract("cut.pdf", data[: int(len(data) * fraction)])
        message = str(err.value)
        assert "cut.pdf" in message and "damaged or incomplete" in message
        assert "Traceback" not in message and "\n" not in message


@needs_pdfs
def test_pdf_named_txt_is_mislabelled():
    data = (PDF_DIR / "sf__minimal-document.pdf").read_bytes()
    with pytest.raises(MislabelledFileError) as err:
        extract("notes.txt", data)
    assert "is a PDF" in str(err.value) and "rename" in str(err.value)
    assert extract("notes", data).mime == PDF_MIME  # no extension: the content decides


# ------------------------------------------------------------------ PDFs built with pypdf


def _pdf_bytes(writer: PdfWriter) -> bytes:
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def _blank_pdf(pages: int) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=200, height=200)
    return _pdf_bytes(writer)


def test_blank_pages_have_no_text_layer():
    with pytest.raises(NoTextLayerError) as err:
        extract("scan.pdf", _blank_pdf(3))
    assert err.value.reason == "no_text" and "scan.pdf" in str(err.value)


def test_page_count_guard(monkeypatch):
    monkeypatch.setattr(extraction, "MAX_PAGES", 5)
    with pytest.raises(TooLargeError) as err:
        extract("bomb.pdf", _blank_pdf(6))
    assert "6 pages" in str(err.value)


@needs_pdfs
def test_one_unreadable_page_is_skipped():
    writer = PdfWriter(clone_from=PDF_DIR / "sf__pdflatex-4-pages.pdf")
    broken = DecodedStreamObject()
    # Unbalanced "(" after a complete text object: pypdf's extract_text raises PdfStreamError.
    broken.set_data(b"BT /F1 12 Tf (hello) Tj ET q Q ((((")
    writer.pages[1][NameObject("/Contents")] = writer._add_object(broken)
    result = extract("damaged.pdf", _pdf_bytes(writer))
    assert result.skipped_pages == (2,)
    assert result.page_count == 4 and len(result.page_starts) == 4
    # The empty page shares its offset with the end of page 1; page 3 follows after "\n\n".
    assert result.page_starts[2] == result.page_starts[1] + 2
    assert result.text[result.page_starts[1] : result.page_starts[2]] == "\n\n"


# ------------------------------------------------------------------------ plain text


def test_utf8_with_bom_and_crlf():
    result = extract("a.txt", codecs.BOM_UTF8 + "Grüße\r\nzweite\rdritte".encode())
    assert result == Extracted("Grüße\nzweite\ndritte", TEXT_MIME, [0], 1)


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be"])
def test_utf16_and_utf32_with_bom(codec):
    text = "Привет, мир — café\r\nnext line"
    bom = {
        "utf-16-le": codecs.BOM_UTF16_LE,
        "utf-16-be": codecs.BOM_UTF16_BE,
        "utf-32-be": codecs.BOM_UTF32_BE,
    }.get(codec, b"")
    assert extract("u.txt", bom + text.encode(codec)).text == text.replace("\r\n", "\n")


def test_cp1252_fallback():
    text = "Café – “quoted” costs €5, naïve façade."
    assert extract("legacy.txt", text.encode("cp1252")).text == text


def test_cp1251_mojibake_is_refused_not_indexed():
    with pytest.raises(EncodingError) as err:
        extract("russian.txt", "Привет, мир! Это проверка кодировки.".encode("cp1251"))
    assert "UTF-8" in str(err.value)


def test_shift_jis_is_refused():
    with pytest.raises(EncodingError):
        extract("jp.txt", "こんにちは世界、これはテストです。".encode("shift_jis"))


def test_bytes_undefined_in_cp1252_are_refused():
    with pytest.raises(EncodingError):
        extract("odd.txt", b"abc \x81\x8d\x90 def \xff")


def test_invalid_utf16_after_bom():
    with pytest.raises(EncodingError):
        extract("bad16.txt", codecs.BOM_UTF16_LE + b"\x00\xd8a")  # lone surrogate


def test_binary_with_nul_bytes_refused():
    data = random.Random(7).randbytes(4096)
    with pytest.raises(BinaryFileError) as err:
        extract("blob.txt", data)
    assert "binary" in str(err.value)


def test_binary_without_nuls_refused_by_control_ratio():
    with pytest.raises(BinaryFileError):
        extract("controls.md", bytes(range(1, 32)) * 50 + b"some text")


def test_known_binary_format_named_txt():
    with pytest.raises(BinaryFileError) as err:
        extract("photo.txt", b"\x89PNG\r\n\x1a\n" + b"\x00" * 100)
    assert "PNG image" in str(err.value)


def test_few_control_chars_are_dropped_not_refused():
    line = b"\x1b[31mERROR\x1b[0m the disk is nearly full, please free some space\n"
    text = extract("log.txt", line * 3 + b"\x1a").text
    assert text == "[31mERROR[0m the disk is nearly full, please free some space\n" * 3


def test_markdown_keeps_indentation_and_mime():
    source = "# Title\n\n    code block\n\ttabbed\n"
    result = extract("README.MD", source.encode())
    assert result.text == source and result.mime == MARKDOWN_MIME


@pytest.mark.parametrize("data", [b"", b" \r\n\t \n", codecs.BOM_UTF8, "\u3000\n".encode()])
def test_empty_and_whitespace_only(data):
    with pytest.raises(EmptyFileError) as err:
        extract("empty.txt", data)
    assert "empty.txt" in str(err.value)


def test_too_large_is_checked_before_parsing():
    with pytest.raises(TooLargeError) as err:
        extract("huge.pdf", b"not even a pdf" * 200_000, max_bytes=2 * 1024 * 1024)
    assert "limit is 2 MB" in str(err.value) and "huge.pdf" in str(err.value)
    extract("fits.txt", b"x" * 10, max_bytes=10)


@pytest.mark.parametrize("name", ["report.doc", "sheet.xls", "archive.tar.gz", "image.PNG"])
def test_unsupported_extension(name):
    with pytest.raises(UnsupportedTypeError) as err:
        extract(name, b"whatever")
    message = str(err.value)
    assert name in message
    assert all(ext in message for ext in (".pdf", ".txt", ".md"))


def test_random_bytes_named_pdf():
    data = random.Random(1).randbytes(2048)
    with pytest.raises(CorruptFileError) as err:
        extract("fake.pdf", data)
    assert isinstance(err.value, MislabelledFileError)
    assert "is named .pdf but is not a PDF" in str(err.value)


def test_text_named_pdf_says_so():
    with pytest.raises(MislabelledFileError) as err:
        extract("notes.pdf", b"just some notes")
    assert "text file" in str(err.value)


def test_pdf_header_junk_then_garbage_is_corrupt():
    with pytest.raises(CorruptFileError) as err:
        extract("junk.pdf", b"\n\n%PDF-1.7\n" + bytes(range(256)) * 20)
    assert not isinstance(err.value, MislabelledFileError)


def test_text_mentioning_the_pdf_header_is_still_text():
    note = b"# Notes\n\nEvery PDF begins with a header such as %PDF-1.7 and ends with a trailer."
    assert extract("notes.md", note).text.startswith("# Notes")


def test_no_extension_uses_mime_hint():
    assert extract("notes", b"# hi", mime="text/markdown; charset=utf-8").mime == MARKDOWN_MIME
    assert extract("notes", b"plain").mime == TEXT_MIME


def test_sniff_mime():
    assert sniff_mime("x.txt", b"  %PDF-1.4 ...") == PDF_MIME
    assert sniff_mime("x.md", b"# hello") == MARKDOWN_MIME
    assert sniff_mime("x.pdf", b"hello") == TEXT_MIME
    assert sniff_mime("x.txt", b"PK\x03\x04rest") == "application/x-damaged-zip"  # opens as no ZIP
    assert sniff_mime("x.txt", b"a\x00b") == "application/octet-stream"
    assert sniff_mime("x.txt", "hi".encode("utf-16")) == TEXT_MIME


def test_every_refusal_is_an_extraction_error_with_a_reason():
    samples = [("a.docx", b"x"), ("a.txt", b""), ("a.pdf", b"nope"), ("a.txt", b"\x00\x01")]
    for name, data in samples:
        with pytest.raises(ExtractionError) as err:
            extract(name, data)
        assert err.value.reason != "error" and name in str(err.value)


# ------------------------------------------------- cleaning printing leftovers (issue 12)

BODY = [
    [
        "The river Jordan.12 rises on the slopes of Mount Hermon and runs south",
        "through the valley; its water is a stop-the-",
        "world resource for every farm on its banks, and irri-",
        "gation canals carry it far from the main channel.",
    ],
    [
        "Dates ripen in the heat of late summer and are dried in the sun.",
        "A table of yields: 3.20 tonnes per hectare, see pp.20 for the method.",
        "",
        "Olive groves need little water but a great deal of patience.",
    ],
    [
        "Wheat is sown after the first rains and harvested in early spring.",
        "Barley tolerates salt better than wheat does, so it grows nearer the sea.",
    ],
    [
        "Figs were among the first fruits people cultivated in the region.",
        "They are eaten fresh, dried, or pressed into cakes for the winter.",
    ],
    [
        "Pomegranates keep for months in a cool store and travel well.",
        "Their juice was used as a dye for leather and cloth.",
    ],
    [
        "Almond trees flower in late winter, weeks before the last frost.",
        "A late frost can take the whole crop in a single night.",
    ],
]
PROOF_STAMPS = ("4TH PASS PAGES", "FRUITS OF THE VALLEY", "Chapter Two", ".qxd", "* * * *")


def _proof_pdf() -> bytes:
    """Six pages printed as layout proofs: stamp, alternating running heads, body, an ornament
    row, page number, a .qxd stamp and margin line numbers drawn last."""
    from pdf_maker import lines_page, text_pdf

    pages = []
    for n, body in enumerate(BODY, start=1):
        head = "FRUITS OF THE VALLEY" if n % 2 == 0 else "Chapter Two"
        items = [(72, 770, 8, "4TH PASS PAGES"), (72, 750, 9, head),
                 *lines_page([*body, "", "* * * *"] if n == 2 else body),
                 (300, 50, 9, str(n + 56)),
                 (72, 30, 6, f"valley_ch02.qxd 5/2/07 10:14 AM Page {n + 56}")]
        items += [(40, 725 - 17 * (k - 1), 7, str(k)) for k in (5, 10, 15)]
        pages.append(items)
    return text_pdf(pages)


def test_proof_leftovers_are_removed_and_the_page_map_stays_exact():
    result = extract("proofs.pdf", _proof_pdf())
    assert result.page_count == 6
    for stamp in PROOF_STAMPS:
        assert stamp not in result.text, stamp
    lines = result.text.split("\n")
    assert not [ln for ln in lines if ln.strip().isdigit()]  # page and margin line numbers
    bounds = [*result.page_starts, len(result.text)]
    for i, body in enumerate(BODY):
        page = result.text[bounds[i]:bounds[i + 1]]
        assert page.startswith(body[0].replace("Jordan.12", "Jordan.[12]")), (i, page[:80])
        assert body[-1].split()[-1] in page  # each page ends with its own last word
    first = result.text[: bounds[1]]
    assert "stop-the-world resource" in first  # a compound keeps its hyphen
    assert "irrigation canals" in first  # a word split at the line end is whole again
    second = result.text[bounds[1]:bounds[2]]
    assert "3.20 tonnes" in second and "pp.20 for" in second  # numbers that are not markers


def test_without_cleanup_the_leftovers_are_there(monkeypatch):
    """The switch the benchmark uses, and proof that the test above had something to remove."""
    monkeypatch.setattr(extraction, "CLEAN_PAGES", False)
    text = extract("proofs.pdf", _proof_pdf()).text
    assert all(stamp in text for stamp in PROOF_STAMPS)


def test_pages_that_repeat_their_whole_text_keep_it():
    from marginalia_core.ingest.cleanup import clean_pages

    assert clean_pages(["Example\nhabibi"] * 4) == ["Example\nhabibi"] * 4


def test_a_column_of_numbers_inside_a_page_is_content():
    from marginalia_core.ingest.cleanup import clean_pages

    prose = ["The survey visited site {s} in spring.", "Three plots were sampled there.",
             "Yields per plot, in sacks:"]
    after = ["The sandy plot did worst.", "Rain fell twice in May at {s}.", "See the map."]
    pages = ["\n".join([*prose, "12", "7", "31", "4", *after]).format(s=s) for s in "ABC"]
    cleaned = clean_pages(pages)
    assert all("\n12\n7\n31\n4\n" in page for page in cleaned)


@pytest.mark.parametrize(("line", "expected"), [
    ("river Jordan.20 He crossed", "river Jordan.[20] He crossed"),
    ("as they said,3 and left", "as they said,[3] and left"),
    ("priced at 3.20 each", "priced at 3.20 each"),
    ("see pp.20 and vol.3", "see pp.20 and vol.3"),
    ("ornaments ❧ ❧ ❧ between", "ornaments between"),
    ("leaders ........ 57", "leaders 57"),
])
def test_line_cleanup(line, expected):
    from marginalia_core.ingest.cleanup import clean_line

    assert clean_line(line) == expected


# ------------------------------------------------------------- words set apart by position


def _set_apart_pdf() -> bytes:
    """Words drawn as separate Courier runs a quarter em apart with no space characters (a
    tightly justified line as layout tools write it), a compound broken at "stop-" with "the-"
    after it, a soft hyphen at a line end, and a word drawn in three touching pieces."""
    from pdf_maker import set_apart, text_pdf

    lines = ["In the fall of 1871, the city burned for two days.",
             "A garbage collector that must stop-",
             "the-world pauses every thread it runs; a soft\xad",
             "hyphenated word joins."]
    items = [item for row, line in enumerate(lines)
             for item in set_apart(line.split(), x=72, y=700 - 14 * row, size=10, gap_em=0.25)]
    items += [(72, 600, 10, "Ma"), (84, 600, 10, "rg"), (96, 600, 10, "inalia")]  # touching
    return text_pdf([items], font="Courier")


def test_words_set_apart_without_spaces_are_separated():
    text = extract("justified.pdf", _set_apart_pdf()).text
    assert text.startswith("In the fall of 1871, the city burned for two days.\n"), text
    assert "must stop-the-world pauses every thread" in text
    assert "a softhyphenated word joins." in text  # the text layer marked that break soft
    assert "Marginalia" in text.split()  # touching pieces of one word stay one word


def test_without_the_geometry_pypdf_reads_them_run_together(monkeypatch):
    """The switch the benchmark uses, and proof the test above had something to repair."""
    monkeypatch.setattr(extraction, "REJOIN_WORDS", False)
    text = extract("justified.pdf", _set_apart_pdf()).text
    assert text.startswith("Inthefallof1871,thecity"), text


def test_respace_adds_spaces_only_where_both_readings_agree():
    from marginalia_core.ingest.word_gaps import respace

    glyphs = "Thecatsat\u2212on"  # pdfium maps the dash differently from pypdf
    breaks = [False, False, False, True, False, False, True, False, False, True, True, False]
    assert respace("Thecatsat-on", glyphs, breaks) == "The cat sat-on"
    assert respace("The cat\nsat", "Thecatsat", [False] * 3 + [True] + [False] * 2 + [True]
                   + [False] * 2) == "The cat\nsat"  # existing whitespace is left alone


def _free_culture_pdf() -> bytes:
    """Thirteen book pages as the 352-page book printed them: a running head that carries the
    page's margin line numbers ("N FREE CULTURE 1 2 3 4 6 7 ... 32S 33R", other numbers on
    every page) and, on even pages, a word hyphenated across the page break."""
    from pdf_maker import text_pdf

    body = ("Creative work has value; whenever I use, or take, or build upon the creative "
            "work of others, I am taking from them something of value.")
    pages = []
    for n in range(1, 14):
        numbers = " ".join(str(k) for k in range(1, 34) if k % (n % 3 + 4)) + " 32S 33R"
        head = f"{n} FREE CULTURE {numbers}" if n % 2 == 0 else f"INTRODUCTION {n} {numbers}"
        start = "ity of the few, " if n % 2 == 1 and n > 1 else ""
        end = " the nobil-" if n % 2 == 0 else ""
        lines = [head, "", start + body, body, body + end]
        pages.append("\n".join(lines))
    return text_pdf(pages)


def test_running_heads_with_line_numbers_and_page_break_hyphens_are_cleaned():
    result = extract("free-culture.pdf", _free_culture_pdf())
    assert "FREE CULTURE" not in result.text and "INTRODUCTION" not in result.text
    assert "32S" not in result.text
    assert result.text.count("the nobility\n\nof the few,") == 6  # joined at the break
    assert "nobil-" not in result.text and "\nity " not in result.text
    bounds = [*result.page_starts, len(result.text)]
    second, third = (result.text[bounds[i]:bounds[i + 1]] for i in (1, 2))
    assert second.rstrip().endswith("the nobility")  # the word stays where it starts
    assert third.startswith("of the few, Creative work")


def test_page_break_hyphens_keep_capitals_and_compounds():
    from marginalia_core.ingest.cleanup import join_page_break_hyphens

    assert join_page_break_hyphens(["the nobil-", "ity, and"]) == ["the nobility,", "and"]
    assert join_page_break_hyphens(["stop-the-", "world now"]) == ["stop-the-world", "now"]
    assert join_page_break_hyphens(["see Rhine-", "Main area"]) == ["see Rhine-", "Main area"]
    assert join_page_break_hyphens(["a dash -", "then"]) == ["a dash -", "then"]


def test_mathematics_is_read_from_pdfium_where_pypdf_garbles_it(pdf_dir):
    """GeoTopo's TeX symbol fonts: pypdf reads "i∈N" as "i2N" and "{A ∈ R}" as "fA2 Rg";
    pdfium reads the symbols, so those pages take its text (the measured rule of word_gaps).
    Arabic that pdfium misreads keeps pypdf's text."""
    geo = extract("geo.pdf", (pdf_dir / "sf__GeoTopo-komprimiert.pdf").read_bytes(), ocr=False)
    assert "i∈N" in geo.text and "i2N" not in geo.text
    habibi = extract("habibi.pdf", (pdf_dir / "sf__habibi.pdf").read_bytes(), ocr=False)
    assert "habibi" in habibi.text and "Β" not in habibi.text


def test_the_rule_wants_more_symbols_and_no_lost_letters():
    from marginalia_core.ingest.word_gaps import pdfium_reads_better

    garbled = "Sei P := Q i2N Pi und fA2 Rn n j det(A) 6= 0 g"
    read = "Sei P := Q i∈N Pi und { A ∈ R n×n | det(A) 6= 0 } ∀s∈I"
    assert pdfium_reads_better(garbled, read)
    assert not pdfium_reads_better(read, garbled)
    assert not pdfium_reads_better(garbled * 3, read)  # pdfium lost most of the words
    assert not pdfium_reads_better("x = 1", "x = 1 ∈")  # one symbol is not enough
