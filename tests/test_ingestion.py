"""Ingestion events and all-or-nothing writes, with the real local embedder and real files."""

from __future__ import annotations

import csv

import pytest

from marginalia_core.config import Settings
from marginalia_core.ingest.pipeline import ingest_bytes, ingest_path, safe_name
from marginalia_core.providers.embeddings.gemini import GeminiEmbedder

pytestmark = pytest.mark.both_backends

TEXT = (
    "Marginalia are notes written in the margins of a book.\n\n"
    "Medieval scribes added glosses beside the text. " * 40
).encode()


def run(gen):
    return list(gen)


def test_events_in_order_and_document_stored(workspace):
    events = run(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                              "notes.md", TEXT))
    kinds = [(e["type"], e.get("stage")) for e in events]
    assert kinds[0] == ("stage", "extracting")
    stages = [s for t, s in kinds if t == "stage"]
    assert stages.index("chunking") < stages.index("embedding") < stages.index("storing")
    progress = [e for e in events if e.get("stage") == "embedding"]
    assert progress[-1]["done"] == progress[-1]["total"] > 0
    assert events[-1]["type"] == "done" and events[-1]["duplicate"] is False
    doc = events[-1]["document"]
    assert doc["embed_model"] == workspace.embedder.model
    assert doc["embed_dim"] == 384
    assert len(workspace.store.document_chunks(doc["id"])) == doc["chunk_count"]


def test_duplicate_is_reported_not_indexed(workspace):
    run(ingest_bytes(workspace.store, workspace.embedder, workspace.settings, "a.txt", TEXT))
    events = run(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                              "copy.txt", TEXT))
    assert events[-1]["type"] == "done" and events[-1]["duplicate"] is True
    assert "already indexed" in events[-1]["message"]
    assert len(workspace.store.list_documents()) == 1


def test_bad_file_is_an_error_event(workspace):
    events = run(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                              "x.pdf", b"not a pdf at all"))
    assert events[-1]["type"] == "error" and events[-1]["file"] == "x.pdf"
    assert "pdf" in events[-1]["message"].lower()
    assert workspace.store.list_documents() == []


def test_oversize_refused_before_reading(tmp_path, workspace):
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * 2048)
    small = Settings(db_path=workspace.settings.db_path, max_upload_mb=0.001)
    events = run(ingest_path(workspace.store, workspace.embedder, small, big))
    assert [e["type"] for e in events] == ["error"]
    assert events[0]["reason"] == "too_large"


def test_embedding_failure_leaves_database_as_it_was(store, db_path, fake_gemini):
    settings = fake_gemini.settings(db_path=str(db_path))
    embedder = GeminiEmbedder(settings)
    ok = run(ingest_bytes(store, embedder, settings, "one.txt", TEXT))
    assert ok[-1]["type"] == "done"
    before = store.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    fake_gemini.fail_next(status=500, times=50)  # outlasts every retry
    many = ("Paragraph about something else entirely. " * 30 + "\n\n").encode() * 200
    events = run(ingest_bytes(store, embedder, settings, "two.txt", many))
    assert events[-1]["type"] == "error"
    assert fake_gemini.api_key not in events[-1]["message"]
    assert [d.name for d in store.list_documents()] == ["one.txt"]
    assert store.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == before


# ~140 s, nearly all of it extracting and embedding: on PostgreSQL it would repeat that for the
# same storage path the other ingestion tests cover
@pytest.mark.sqlite_only
def test_every_eval_pdf_indexed_or_refused_with_reason(pdf_dir, workspace):
    with open(pdf_dir / "MANIFEST.tsv", newline="") as fh:
        manifest = list(csv.DictReader(fh, delimiter="\t"))
    outcomes, matched = {}, {}
    for row in manifest:
        events = run(ingest_path(workspace.store, workspace.embedder, workspace.settings,
                                 pdf_dir / row["file"]))
        last = events[-1]
        outcomes[row["file"]] = last["reason"] if last["type"] == "error" else "indexed"
        matched[row["file"]] = last.get("existing_name")
    assert outcomes["sf__libreoffice-writer-password.pdf"] == "encrypted"
    assert outcomes["pypdf__encrypted-file.pdf"] == "encrypted"
    assert outcomes["pypdf__r4-aes-user-password.pdf"] == "encrypted"
    # owner password only, so it opens; its text is exactly that of pypdf's r6 sample, read
    # just before it: a near-duplicate, named
    assert outcomes["pypdf__r6-user-password.pdf"] == "indexed"
    assert outcomes["pypdf__r2-owner-password.pdf"] == "near_duplicate"
    assert matched["pypdf__r2-owner-password.pdf"] == "pypdf__r6-user-password.pdf"
    assert outcomes["sf__imagemagick-CCITTFaxDecode.pdf"] == "no_text"
    assert outcomes["sf__unreadablemetadata.pdf"] in {"corrupt", "no_text"}
    assert outcomes["sf__GeoTopo-komprimiert.pdf"] == "indexed"
    assert sum(v in ("indexed", "near_duplicate") for v in outcomes.values()) >= 18
    report = workspace.store.integrity_report()
    assert report["integrity"] == "ok" and not report["mismatched_documents"]
    geo = next(d for d in workspace.store.list_documents() if d.name.startswith("sf__GeoTopo"))
    assert geo.page_count == 117


def test_password_opens_encrypted_pdf(pdf_dir, workspace):
    events = run(ingest_path(workspace.store, workspace.embedder, workspace.settings,
                             pdf_dir / "sf__libreoffice-writer-password.pdf",
                             password="openpassword"))
    assert events[-1]["type"] == "done"


def test_safe_name_strips_paths_and_controls():
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("a\\b\\c.txt") == "c.txt"
    assert safe_name("bad\x00\x1bname.md") == "bad__name.md"
    assert safe_name("") == "unnamed"


def test_reindex_with_new_chunk_settings_replaces_in_place(workspace):
    from marginalia_core.ingest.pipeline import reindex_document

    done = run(ingest_bytes(workspace.store, workspace.embedder, workspace.settings, "a.md", TEXT))
    doc = done[-1]["document"]
    events = run(reindex_document(workspace.store, workspace.embedder, workspace.settings,
                                  doc["id"], target=400, overlap=50))
    assert events[-1]["type"] == "done" and events[-1]["reindexed"]
    new = workspace.store.get_document(doc["id"])
    assert new.chunk_target == 400 and new.chunk_count > doc["chunk_count"]
    chunks = workspace.store.document_chunks(doc["id"])
    assert len(chunks) == new.chunk_count and max(len(c.content) for c in chunks) <= 400
    assert len(workspace.store.list_documents()) == 1


@pytest.mark.slow
def test_reading_and_embedding_overlap_without_changing_the_result(workspace):
    """Chunks that settle while a PDF is read are embedded early, on another thread; the stored
    document is the same as chunking and embedding the whole text afterwards."""
    import numpy as np
    from pdf_maker import long_pdf

    from marginalia_core.ingest.chunking import chunk_text
    from marginalia_core.ingest.embed_cache import EmbeddingCache
    from marginalia_core.ingest.formats import extract
    from marginalia_core.ingest.pipeline import _EarlyEmbeddings, _EmbeddingProgress

    data = long_pdf(12)
    s = workspace.settings
    emb = workspace.embedder
    early = _EarlyEmbeddings(emb, EmbeddingCache(workspace.store, emb.key),
                             s.retrieval.chunk_target, s.retrieval.chunk_overlap)
    extracted = extract("book.pdf", data, on_page=lambda _d, _t, text: early.add_page(text))
    chunks = chunk_text(extracted.text, target=s.retrieval.chunk_target,
                        overlap=s.retrieval.chunk_overlap, page_starts=extracted.page_starts)
    texts = {c.text for c in chunks}
    waiting = early.finish("book.pdf", texts, _EmbeddingProgress("book.pdf", len(texts), 0))
    progress = []
    while True:
        try:
            progress.append(next(waiting))
        except StopIteration as end:
            vectors = end.value
            break
    assert all(e["stage"] == "embedding" for e in progress)
    reused = [c for c in chunks if c.text in vectors]
    assert len(reused) >= len(chunks) // 3  # embedded while pages were still being read
    assert set(vectors) <= {c.text for c in chunks}  # nothing embedded that is not stored

    events = run(ingest_bytes(workspace.store, workspace.embedder, s, "book.pdf", data))
    assert events[-1]["type"] == "done"
    stored = workspace.store.document_chunks(events[-1]["document"]["id"])
    assert [c.content for c in stored] == [c.text for c in chunks]
    fresh = workspace.embedder.embed_documents([c.text for c in chunks])
    by_id = dict(zip(*workspace.store.vectors_by_ids([c.id for c in stored])))
    got = np.stack([by_id[c.id] for c in stored])  # in passage order, on either backend
    assert np.allclose(got, fresh, atol=1e-4)
