"""Near-duplicates: a file whose text matches a document already indexed (the same text after
normalisation, or >= 95 % of its passages shared) is refused naming that document, or replaces
it at the person's choice (settings, the CLI, the Documents page)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import streamlit as st
from conftest import ROOT, offline_cli_env, settle
from streamlit.testing.v1 import AppTest

from marginalia_core.ingest.jobs import JobQueue, Upload
from marginalia_core.ingest.pipeline import follow, ingest_bytes
from marginalia_core.store.fingerprint import fingerprint
from tests.pdf_maker import book_pages, text_pdf

ESSAY = "\n\n".join(
    f"Paragraph {n}. The scribe copied the gloss into folio {n * 3}, where later readers "
    f"added their own notes in the margin beside the commentary on verse {n + 7}; the "
    f"binding of quire {n % 9} was repaired twice, once with vellum and once with paper."
    for n in range(1, 61)
).encode()


def one_byte_changed(data: bytes, needle: bytes) -> bytes:
    """``data`` with the byte after ``needle``'s first occurrence changed: a copy that differs
    by exactly one byte."""
    at = data.index(needle) + len(needle)
    flipped = bytes([data[at] ^ 0x01])
    changed = data[:at] + flipped + data[at + 1:]
    assert len(changed) == len(data) and sum(a != b for a, b in zip(changed, data)) == 1
    return changed


def ingest(store, emb, settings, name: str, data: bytes):
    return follow(ingest_bytes(store, emb, settings, name, data))


def test_a_one_byte_different_pdf_is_refused_naming_the_original(store, settings,
                                                                  local_embedder):
    """The PDF's header comment differs by a byte: another content hash, the same text."""
    pdf = text_pdf(book_pages(3, lines=10))
    first = ingest(store, local_embedder, settings, "ledger.pdf", pdf)
    assert first["type"] == "done"
    copy = one_byte_changed(pdf, b"%PDF-1.4\n%")
    end = ingest(store, local_embedder, settings, "ledger (1).pdf", copy)
    assert end["type"] == "error" and end["reason"] == "near_duplicate"
    assert "ledger.pdf" in end["message"] and "same text" in end["message"]
    assert end["existing_id"] == first["document"]["id"]
    assert end["existing_name"] == "ledger.pdf"
    assert [d.name for d in store.list_documents()] == ["ledger.pdf"]


def test_a_one_byte_different_text_is_caught_by_its_shared_passages(store, settings,
                                                                     local_embedder):
    """One letter changed in a 60-paragraph essay: the text hash differs, but almost every
    passage is shared."""
    first = ingest(store, local_embedder, settings, "essay.txt", ESSAY)
    assert first["type"] == "done"
    typo = one_byte_changed(ESSAY, b"Paragraph 31. The scr")
    assert fingerprint(typo.decode()).text_hash != fingerprint(ESSAY.decode()).text_hash
    end = ingest(store, local_embedder, settings, "essay-v2.txt", typo)
    assert end["type"] == "error" and end["reason"] == "near_duplicate", end
    assert "essay.txt" in end["message"] and "of its passages" in end["message"]
    assert len(store.list_documents()) == 1


def test_formatting_differences_are_the_same_text(store, settings, local_embedder):
    """Case, spacing, line breaks and punctuation do not make a new text."""
    assert ingest(store, local_embedder, settings, "a.txt", ESSAY)["type"] == "done"
    reflowed = ESSAY.decode().upper().replace("\n\n", "\n").replace(", ", " , ").encode()
    end = ingest(store, local_embedder, settings, "b.md", reflowed)
    assert end["reason"] == "near_duplicate" and "same text" in end["message"]


def test_a_related_but_different_document_is_indexed(store, settings, local_embedder):
    """Half the essay, or the essay with as much new text again, is not a near-duplicate."""
    assert ingest(store, local_embedder, settings, "essay.txt", ESSAY)["type"] == "done"
    half = ESSAY[: len(ESSAY) // 2]
    assert ingest(store, local_embedder, settings, "half.txt", half)["type"] == "done"
    longer = ESSAY + b"\n\n" + ESSAY.replace(b"scribe", b"printer").replace(b"gloss", b"type")
    assert ingest(store, local_embedder, settings, "longer.txt", longer)["type"] == "done"
    assert len(store.list_documents()) == 3


def test_replace_keeps_the_id_and_takes_the_new_file(store, settings, local_embedder):
    first = ingest(store, local_embedder, settings, "essay.txt", ESSAY)
    typo = one_byte_changed(ESSAY, b"Paragraph 12. The ")
    end = ingest(store, local_embedder, replace(settings, on_duplicate="replace"),
                 "essay-v2.txt", typo)
    assert end["type"] == "done" and not end["duplicate"]
    [doc] = store.list_documents()
    assert doc.id == first["document"]["id"] and doc.name == "essay-v2.txt"
    text, _ = store.document_source(doc.id)
    assert text == typo.decode()


def test_a_refused_job_keeps_its_upload_until_the_person_chooses(store, settings,
                                                                 local_embedder):
    queue = JobQueue(store, settings, lambda: local_embedder)
    original = ingest(store, local_embedder, settings, "essay.txt", ESSAY)
    copy = one_byte_changed(ESSAY, b"Paragraph 40. ")
    [job] = queue.submit([Upload("essay copy.txt", copy)], running=True)
    end = list(queue.run(job.id))[-1]
    assert end["reason"] == "near_duplicate"
    refused = queue.job(job.id)
    assert refused.offers_replace and refused.document_id == original["document"]["id"]
    assert queue.resume(job.id) == []  # resuming alone does not override the refusal
    [again] = queue.resume(job.id, replace=True)
    assert queue.claim().id == again.id
    end = list(queue.run(again.id))[-1]
    assert end["type"] == "done"
    [doc] = store.list_documents()
    assert doc.name == "essay copy.txt" and doc.id == original["document"]["id"]


def _cli(db, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "marginalia_core", "ingest", "--db", str(db), *args],
        capture_output=True, text=True, env=offline_cli_env(), cwd=ROOT, timeout=600,
    )


@pytest.mark.sqlite_only
def test_cli_refuses_by_default_and_replaces_when_told(tmp_path, db_path):
    first, second = tmp_path / "essay.txt", tmp_path / "essay-fixed.txt"
    first.write_bytes(ESSAY)
    second.write_bytes(one_byte_changed(ESSAY, b"Paragraph 5. The scri"))
    assert _cli(db_path, str(first)).returncode == 0
    refused = _cli(db_path, str(second))
    assert refused.returncode == 1
    last = json.loads(refused.stdout.strip().splitlines()[-1])
    assert last["reason"] == "near_duplicate" and last["existingName"] == "essay.txt"
    assert "essay.txt" in refused.stderr
    replaced = _cli(db_path, str(second), "--on-duplicate", "replace")
    assert replaced.returncode == 0, replaced.stderr
    last = json.loads(replaced.stdout.strip().splitlines()[-1])
    assert last["type"] == "done" and last["document"]["name"] == "essay-fixed.txt"


@pytest.fixture
def app_env(db_path, monkeypatch):
    monkeypatch.setenv("MARGINALIA_DB", str(db_path))
    monkeypatch.setenv("MARGINALIA_EMBEDDER", "local")
    monkeypatch.setenv("MARGINALIA_ANSWERER", "extractive")
    st.cache_resource.clear()
    st.cache_data.clear()
    yield db_path
    st.cache_resource.clear()
    st.cache_data.clear()


def test_documents_page_offers_to_replace_the_document_it_matches(app_env):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/documents.py").run()
    at.file_uploader[0].set_value([("essay.txt", ESSAY, "text/plain")]).run()
    settle(at, app_env)
    copy = one_byte_changed(ESSAY, b"Paragraph 50. ")
    at.file_uploader[0].set_value([("essay (2).txt", copy, "text/plain")]).run()
    settle(at, app_env)
    card = next(s for s in at.status if "refused" in s.label)
    assert "already indexed" in card.label
    assert "with essay\\.txt" in card.markdown[0].value  # escaped Markdown
    replace_button = next(b for b in at.button if b.key and b.key.startswith("replace-"))
    assert "essay\\.txt" in replace_button.label  # escaped: labels are Markdown
    replace_button.click().run()
    settle(at, app_env)
    table = at.dataframe[0].value
    assert table["Document"].tolist() == ["essay (2).txt"]
