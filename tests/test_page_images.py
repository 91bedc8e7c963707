"""PDF page views: the original kept with the document (m007), the page rendered with the cited
passage painted on it, the cache, and the fallback when a page cannot be rendered."""

from __future__ import annotations

import io
import sqlite3

import numpy as np
import pytest
from conftest import SAMPLES
from PIL import Image

from marginalia_app import passages as mg
from marginalia_core.ingest.page_images import PageRenderer, PageRenderError, find_ranges

PDF = SAMPLES / "caring-for-old-books.pdf"
CITED = "A stable, cool room is best: about 16 to 20 degrees Celsius with a relative humidity " \
        "between 40 and 55 percent."


def _ingest(ws, name: str, data: bytes) -> dict:
    end = list(ws.ingest(name, data))[-1]
    assert end["type"] == "done", end
    return end["document"]


def _orange_pixels(image: Image.Image) -> int:
    """Pixels tinted by the highlight (the page itself is black on white)."""
    r, g, b = np.asarray(image.convert("RGB")).astype(int).transpose(2, 0, 1)
    return int(((r > 200) & (g > 150) & (g < 235) & (b < 190)).sum())


def test_the_original_pdf_is_kept_with_the_document_and_deleted_with_it(workspace):
    data = PDF.read_bytes()
    doc = _ingest(workspace, PDF.name, data)
    assert workspace.store.document_file(doc["id"]) == data
    notes = b"# Notes\n\nPlain words about nothing in particular.\n"
    text = _ingest(workspace, "notes.md", notes)
    assert workspace.store.document_file(text["id"]) == notes  # for download; no page view
    assert workspace.page_image(text["id"], [1]) is None
    # re-indexing replaces the document in one transaction and carries the original over
    assert list(workspace.reindex(doc["id"], target=600, overlap=50))[-1]["type"] == "done"
    assert workspace.store.document_file(doc["id"]) == data
    assert workspace.delete_document(doc["id"]) and workspace.delete_document(text["id"])
    count = workspace.store.conn.execute("SELECT COUNT(*) FROM document_files").fetchone()[0]
    assert count == 0  # gone with its document (ON DELETE CASCADE)


def test_a_file_row_needs_its_document(store):
    with pytest.raises(sqlite3.IntegrityError), store.write() as conn:
        conn.execute("INSERT INTO document_files (document_id, data) VALUES ('nope', x'00')")


def test_the_cited_page_is_rendered_with_the_passage_highlighted(workspace):
    doc = _ingest(workspace, PDF.name, PDF.read_bytes())
    plain = workspace.page_image(doc["id"], [1], [])
    cited = workspace.page_image(doc["id"], [1], [CITED])
    assert plain is not None and cited is not None
    assert cited.page == 1 and cited.highlighted >= 1 and plain.highlighted == 0
    image = Image.open(io.BytesIO(cited.data))
    assert image.format == "JPEG" and image.size == (cited.width, cited.height)
    assert cited.height > cited.width >= 600  # a portrait page, readable width
    assert _orange_pixels(image) > 10 * _orange_pixels(Image.open(io.BytesIO(plain.data))) + 100
    # the same page again comes from the cache; only the boxes are painted anew
    renders = workspace.page_renderer.renders
    workspace.page_image(doc["id"], [1], ["Rapid swings of temperature and humidity do more harm"])
    assert workspace.page_renderer.renders == renders
    # and a view asked for again (every rerun of the page) is the finished image itself
    assert workspace.page_image(doc["id"], [1], [CITED]) is cited


def test_the_page_that_has_the_sentence_is_chosen_from_a_range(workspace):
    doc = _ingest(workspace, PDF.name, PDF.read_bytes())
    last_page_text = workspace.store.document_source(doc["id"])
    text, starts = last_page_text
    second = text[starts[1]:].split(".")[0].strip()  # the first sentence of page 2
    assert len(second) > 20
    image = workspace.page_image(doc["id"], [1, 2], [second])
    assert image.page == 2 and image.highlighted >= 1


def test_sentences_are_found_across_line_breaks_and_hyphens():
    letters = "keepbooksoutofdirectsunlightwhichfadescovers"
    assert find_ranges(letters, ["Keep books out of direct sun-\nlight, which fades covers."]) == [
        (0, len(letters))]
    assert find_ranges(letters, ["short"]) == []  # too short to place with confidence


def test_a_page_that_cannot_be_rendered_falls_back_to_the_text(workspace):
    renderer = PageRenderer()
    with pytest.raises(PageRenderError):
        renderer.render("x", b"%PDF-1.4 not really a pdf", [1], [])
    with pytest.raises(PageRenderError):
        renderer.render("y", PDF.read_bytes(), [99], [])
    # in the margin: a note instead of the image, the passage text stays
    doc = _ingest(workspace, PDF.name, PDF.read_bytes())
    with workspace.store.write() as conn:
        conn.execute("UPDATE document_files SET data = x'00' WHERE document_id = ?", (doc["id"],))
    source = {"n": 1, "document_id": doc["id"], "document_name": PDF.name, "page": 1,
              "page_end": 1, "content": CITED}
    view = mg.page_view(workspace, source, [CITED])
    assert view is not None and view.data_uri is None and view.note == mg.PAGE_VIEW_FALLBACK
    card = mg.card_html(source, anchor="src-a-1", mime="application/pdf", sentences=[CITED],
                        cited=True, is_open=True, page_view=view)
    assert mg.PAGE_VIEW_FALLBACK in card and "mg-hl" in card and "<img" not in card


def test_no_page_view_for_documents_without_an_original(workspace):
    doc = _ingest(workspace, "notes.md", b"# Notes\n\nPlain words about nothing in particular.\n")
    source = {"n": 1, "document_id": doc["id"], "document_name": "notes.md", "page": 1}
    assert mg.page_view(workspace, source, []) is None
