"""Parse health: pages with no text, OCR'd, unreadable or garbled pages and tables found, kept
with each document and shown on the Documents page."""

from __future__ import annotations

import streamlit as st
from conftest import ROOT
from pdf_maker import text_pdf
from streamlit.testing.v1 import AppTest

from marginalia_app import presentation as fmt
from marginalia_core.ingest.health import count_tables, page_is_garbled
from marginalia_core.ingest.pipeline import follow, ingest_bytes, reindex_document

PROSE = ("The scribe copied the gloss into the margin of the folio, and the reader who came "
         "after him added a note of his own beside it. ") * 8
# what a font mapped to the wrong code points reads as: a few letters among symbols (a line
# of symbols alone is an ornament row, which cleanup removes)
SOUP = "\n".join("a$%& @!^ <>b {}[] |/\\ ?:; c&$% ^!@ d" for _ in range(12))
TABLE = "\n".join(
    ["Year Sales Costs Margin"]
    + [f"{2000 + i} {1200 + 37 * i} {800 + 21 * i} {400 + 16 * i}" for i in range(8)]
)
MARKDOWN_TABLE = "| a | b |\n|---|---|\n| 1 | 2 |\n"


def test_garbled_pages_are_told_from_prose_and_formulas():
    assert not page_is_garbled(PROSE)
    assert not page_is_garbled("Let x = 3 + 4 (y - 2) / 5 and f(x) = x^2 + 2x + 1. " * 4)
    assert page_is_garbled(SOUP)
    assert page_is_garbled(PROSE[:200] + "\ufffd" * 10)  # a broken font mapping
    assert not page_is_garbled("!!")  # too little to tell


def test_tables_are_counted():
    assert count_tables(TABLE) == 1
    assert count_tables(MARKDOWN_TABLE + "\n\n" + PROSE + "\n\n" + MARKDOWN_TABLE) == 2
    assert count_tables(PROSE) == 0
    assert count_tables("Chapter 1 begins on page 3 of 200.\n" * 5) == 0  # numbers in prose


def test_page_ranges():
    assert fmt.page_ranges([7, 1, 2, 3, 9, 10]) == "1–3, 7, 9–10"
    assert fmt.page_ranges([]) == ""


def health_pdf() -> bytes:
    """Page 1 prose, page 2 blank, page 3 symbol soup, page 4 a table, page 5 prose."""
    return text_pdf([PROSE, "", SOUP, TABLE, PROSE.replace("scribe", "printer")])


def test_a_documents_health_is_stored_and_survives_reindexing(store, settings, local_embedder):
    end = follow(ingest_bytes(store, local_embedder, settings, "mixed.pdf", health_pdf()))
    assert end["type"] == "done", end
    doc = store.get_document(end["document"]["id"])
    health = doc.parse_health
    assert health["pages"] == 5
    assert health["empty"] == [2] and health["garbled"] == [3] and health["tables"] == 1
    assert health["ocr"] == [] and health["unreadable"] == []
    assert fmt.health_summary(doc) == "1 page no text · 1 page garbled · 1 table"
    assert fmt.health_details(doc)[:2] == ["no text: pages 2", "garbled: pages 3"]
    again = follow(reindex_document(store, local_embedder, settings, doc.id, target=700))
    assert again["type"] == "done"
    assert store.get_document(doc.id).parse_health == health


def test_a_clean_text_file_is_all_read(store, settings, local_embedder):
    end = follow(ingest_bytes(store, local_embedder, settings, "notes.txt", PROSE.encode()))
    doc = store.get_document(end["document"]["id"])
    assert fmt.health_summary(doc) == "all read" and not fmt.has_health_problems(doc)


def test_the_documents_page_shows_what_was_not_read(db_path, monkeypatch, workspace):
    monkeypatch.setenv("MARGINALIA_DB", str(db_path))
    monkeypatch.setenv("MARGINALIA_EMBEDDER", "local")
    monkeypatch.setenv("MARGINALIA_ANSWERER", "extractive")
    st.cache_resource.clear()
    st.cache_data.clear()
    try:
        assert follow(workspace.ingest("mixed.pdf", health_pdf()))["type"] == "done"
        assert follow(workspace.ingest("notes.txt", PROSE.encode()))["type"] == "done"
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        at.switch_page("pages/documents.py").run()
        assert not at.exception
        table = at.dataframe[0].value
        read = dict(zip(table["Document"], table["Read"]))
        assert read == {"mixed.pdf": "1 page no text · 1 page garbled · 1 table",
                        "notes.txt": "all read"}
        [box] = [e for e in at.expander if "not read well" in e.label]
        text = box.markdown[0].value
        assert "mixed\\.pdf" in text  # escaped Markdown
        assert "no text\\: pages 2" in text and "garbled\\: pages 3" in text
    finally:
        st.cache_resource.clear()
        st.cache_data.clear()
