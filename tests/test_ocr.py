"""OCR of scanned PDFs: pages without a text layer are rendered (pypdfium2) and read by tesseract.

The scan is made the way a scanner would: the eval set's Vicksburg pages (a real 1860s book scan)
are rendered to images and rebuilt as an image-only PDF, so no text layer is left to lean on.
Tests skip when tesseract is not installed, unless MARGINALIA_REQUIRE_OCR=1 (set in .ci/run).
"""

from __future__ import annotations

import io
import os

import pytest
from conftest import PDFS, document, requires_eval
from pdf_maker import outline_pdf, text_pdf
from pypdf import PdfReader, PdfWriter

from marginalia_app import passages as mg
from marginalia_app import presentation as fmt
from marginalia_core.config import load_settings
from marginalia_core.errors import NoTextLayerError
from marginalia_core.ingest import ocr
from marginalia_core.ingest.formats import extract
from marginalia_core.ingest.pipeline import IngestOutcome, follow
from marginalia_core.workspace import Workspace

VICKSBURG = PDFS / "pypdf__Seige_of_Vicksburg_Sample_OCR.pdf"
CCITT_SCAN = PDFS / "sf__imagemagick-CCITTFaxDecode.pdf"
OXEN = "How many yoke of oxen did it take to haul the siege guns?"  # p10 of pdfs_pages.jsonl

if not ocr.available():
    if os.environ.get("MARGINALIA_REQUIRE_OCR") == "1":
        raise RuntimeError("MARGINALIA_REQUIRE_OCR=1 but tesseract is not installed "
                           "(apt-get install tesseract-ocr tesseract-ocr-eng)")
    pytest.skip("tesseract is not installed (apt-get install tesseract-ocr tesseract-ocr-eng)",
                allow_module_level=True)


def _pdf(writer: PdfWriter) -> bytes:
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def _pages(path, numbers: list[int]) -> bytes:
    """Pages ``numbers`` (1-based) of a PDF, as a new PDF."""
    reader = PdfReader(path)
    writer = PdfWriter()
    for n in numbers:
        writer.add_page(reader.pages[n - 1])
    return _pdf(writer)


@pytest.fixture(scope="module")
def scan() -> bytes:
    """Vicksburg pages 3-4 as an image-only PDF (page 2 of it tells of the oxen)."""
    requires_eval(VICKSBURG)
    data = ocr.rasterize_pdf(_pages(VICKSBURG, [3, 4]))
    assert all(not (p.extract_text() or "").strip() for p in PdfReader(io.BytesIO(data)).pages)
    return data


def test_scanned_pdf_indexes_with_ocr_text_that_answers_a_question(scan, workspace: Workspace):
    stream = list(workspace.ingest("vicksburg-scan.pdf", scan))
    ocr_events = [e for e in stream if e["type"] == "stage" and e["stage"] == "ocr"]
    assert [(e["done"], e["total"]) for e in ocr_events] == [(1, 2), (2, 2)]
    outcome = IngestOutcome.from_event(stream[-1], "vicksburg-scan.pdf")
    assert outcome.state == "indexed", outcome
    doc = workspace.documents()[0]
    assert doc.ocr_pages == [1, 2] and doc.page_count == 2
    hits = workspace.search(OXEN)
    assert hits, "the OCR text should answer the question"
    top = hits[0]
    assert top.page_start <= 2 <= top.page_end and "oxen" in top.content.lower()
    source = workspace.sources(hits)[0]
    assert source["ocr"] is True
    assert "OCR" in mg.card_label(source, "application/pdf").split(" · ")  # the margin says so
    assert fmt.ocr_label(doc) == "OCR"


def test_mixed_pdf_ocrs_only_its_empty_pages(scan):
    requires_eval(PDFS / "sf__crazyones-pdfa.pdf")
    writer = PdfWriter()
    writer.append(PdfReader(PDFS / "sf__crazyones-pdfa.pdf"))  # 1 page with a text layer
    writer.append(PdfReader(io.BytesIO(scan)), pages=[1])  # the oxen page, image only
    calls: list[tuple[int, int]] = []
    result = extract("mixed.pdf", _pdf(writer), ocr_progress=lambda d, t: calls.append((d, t)))
    assert result.ocr_pages == (2,) and calls == [(1, 1)]
    assert "crazy ones" in result.text[: result.page_starts[1]].lower()
    assert "oxen" in result.text[result.page_starts[1]:].lower()
    assert fmt.ocr_label(document(ocr_pages=[2], page_count=2)) == "OCR, 1 of 2 pages"


def test_ocr_turned_off_refuses_a_scan_and_says_how_to_turn_it_on(scan, monkeypatch):
    monkeypatch.setenv("MARGINALIA_OCR", "0")
    settings = load_settings()
    assert settings.ocr is False
    with pytest.raises(NoTextLayerError) as err:
        extract("scan.pdf", scan, ocr=settings.ocr)
    assert "MARGINALIA_OCR=0" in str(err.value) and err.value.reason == "no_text"


def test_missing_engine_is_a_clear_refusal(scan, monkeypatch):
    monkeypatch.setattr(ocr, "TESSERACT", "tesseract-not-installed-here")
    assert not ocr.available()
    with pytest.raises(NoTextLayerError) as err:
        extract("scan.pdf", scan)
    assert "tesseract-ocr" in str(err.value) and "not installed" in str(err.value)


def test_eval_scan_without_any_text_is_refused_after_ocr(workspace: Workspace):
    """sf__imagemagick-CCITTFaxDecode.pdf is a 16x16-pixel fax image (a smiley): nothing to read."""
    requires_eval(CCITT_SCAN)
    end = follow(workspace.ingest_path(CCITT_SCAN))
    assert end["type"] == "error" and end["reason"] == "no_text"
    assert "OCR found no readable text" in end["message"]
    assert workspace.documents() == []


def test_reindex_keeps_the_ocr_record(scan, workspace: Workspace):
    end = follow(workspace.ingest("scan.pdf", scan))
    doc_id = end["document"]["id"]
    again = follow(workspace.reindex(doc_id, target=600))
    assert again["type"] == "done"
    assert workspace.store.get_document(doc_id).ocr_pages == [1, 2]


@pytest.mark.parametrize("raw", ["0", "off", "False", "no"])
def test_ocr_setting_accepts_the_usual_off_words(raw):
    assert load_settings({"MARGINALIA_OCR": raw}).ocr is False
    assert load_settings({}).ocr is True


def test_ocr_setting_rejects_nonsense():
    with pytest.raises(ValueError, match="MARGINALIA_OCR"):
        load_settings({"MARGINALIA_OCR": "maybe"})


def test_a_page_drawn_as_outlines_is_read_like_a_scan():
    """Text converted to outlines (filled shapes, no font, no image) has nothing to extract;
    it is OCR'd as a scan would be, and a blank page beside it costs nothing."""
    lines = ["The oxen drank from the river at dawn.", "Forty yoke hauled the siege guns."]
    drawn = outline_pdf(lines)
    assert not (PdfReader(io.BytesIO(drawn)).pages[0].extract_text() or "").strip()
    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(drawn)))
    writer.add_blank_page(width=612, height=792)
    writer.append(PdfReader(io.BytesIO(text_pdf(["A page with an ordinary text layer."]))))
    got = extract("outlines.pdf", _pdf(writer))
    assert got.ocr_pages == (1,)
    assert "oxen drank from the river" in " ".join(got.text.split())
    assert "ordinary text layer" in got.text
