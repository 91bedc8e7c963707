"""Embed once: the embedding cache under ingestion, re-indexing, resumed jobs and the lab, and
embedding progress that counts only the passages really embedded and never goes backwards."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from pypdf import PdfReader, PdfWriter

from marginalia_core.config import Settings
from marginalia_core.errors import JobInterruptedError
from marginalia_core.ingest.jobs import JobQueue, Upload
from marginalia_core.ingest.pipeline import follow, ingest_bytes, reindex_document
from tests.pdf_maker import WORDS, text_pdf

CHUNK_TARGET = 600  # small passages: more of them, in little text


class CountingEmbedder:
    """The real local embedder, counting the passages it is asked to embed."""

    def __init__(self, inner):
        self.inner = inner
        self.embedded: list[str] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed_documents(self, texts: Sequence[str], progress=None) -> np.ndarray:
        vectors = self.inner.embed_documents(texts, progress=progress)
        self.embedded.extend(texts)  # counted once done: an abandoned call returns nothing
        return vectors


def running_head_book(pages: int) -> bytes:
    """A book whose pages carry a running head (the book's title on even pages, the chapter's
    on odd ones) with the page number, as layout tools print them: cleanup removes the heads
    only once it has seen them repeat, after the pages were read."""
    out = []
    for n in range(1, pages + 1):
        head = f"{n} THE CLOISTER AND THE PRESS" if n % 2 == 0 else f"CHAPTER {1 + n // 10}. VELLUM {n}"
        rows = [head, ""]
        for i in range(14):
            words = [WORDS[(n * 5 + i * 7 + k * 3) % len(WORDS)] for k in range(12)]
            rows.append(f"On page {n} the {i}th note reads " + " ".join(words) + ".")
        out.append("\n".join(rows))
    return text_pdf(out)


def resaved(data: bytes) -> bytes:
    """The same PDF written again by another program: other bytes, the same text."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.add_metadata({"/Producer": "a re-saving viewer"})
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


@pytest.fixture
def book_settings(settings: Settings) -> Settings:
    return settings.with_overrides(chunk_target=CHUNK_TARGET, chunk_overlap=100,
                                   embed_while_reading=True)


def embedding_events(events_: list[dict]) -> list[dict]:
    return [e for e in events_ if e["type"] == "stage" and e["stage"] == "embedding"]


def test_book_progress_counts_passages_to_embed_and_never_decreases(
    store, book_settings, local_embedder
):
    """The 352-page book's "644 of 644 passages embedded", then "157 of 644": passages embedded
    early from text that cleanup later changed were counted as done. Now every embedding event
    counts distinct passages this ingestion embeds, rises monotonically to its total, and the
    total is what the embedder was really asked for."""
    emb = CountingEmbedder(local_embedder)
    data = running_head_book(40)
    out = list(ingest_bytes(store, emb, book_settings, "book.pdf", data))
    assert out[-1]["type"] == "done", out[-1]
    progress = embedding_events(out)
    assert progress, "no embedding progress"
    totals = {e["total"] for e in progress}
    assert len(totals) == 1, f"the total moved: {sorted(totals)}"
    done = [e["done"] for e in progress]
    assert done == sorted(done), f"progress went backwards: {done}"
    assert done[-1] == progress[-1]["total"]
    texts = {c.content for c in store.document_chunks(out[-1]["document"]["id"])}
    assert progress[-1]["total"] == len(texts)
    # early vectors were kept, not redone: nothing embedded twice, nothing left out of the
    # count (the heads cleaned away after reading must not make early work wasted)
    assert len(emb.embedded) == len(set(emb.embedded))
    wasted = set(emb.embedded) - texts
    assert len(wasted) <= 0.1 * len(texts), f"{len(wasted)} early passages thrown away"
    stored = store.document_chunks(out[-1]["document"]["id"])
    assert not any("THE CLOISTER AND THE PRESS" in c.content for c in stored)


@pytest.mark.both_backends  # the cache is a store table: each backend's own
def test_a_resaved_copy_and_a_reindex_embed_nothing_new(store, book_settings, local_embedder):
    """A re-saved copy (other bytes, the same text) replaces the first one and a re-index with
    the same passage size: both take every vector from the cache."""
    emb = CountingEmbedder(local_embedder)
    data = running_head_book(12)
    first = follow(ingest_bytes(store, emb, book_settings, "book.pdf", data))
    assert first is not None and first["type"] == "done"
    embedded_once = len(emb.embedded)
    assert embedded_once > 0

    emb.embedded.clear()
    copy = resaved(data)
    assert copy != data
    out = list(ingest_bytes(store, emb, replace(book_settings, on_duplicate="replace"),
                            "book (copy).pdf", copy))
    assert out[-1]["type"] == "done" and not out[-1]["duplicate"], out[-1]
    assert emb.embedded == []
    last = embedding_events(out)[-1]
    assert (last["done"], last["total"], last["cached"]) == (0, 0, embedded_once)

    doc_id = out[-1]["document"]["id"]
    out = list(reindex_document(store, emb, book_settings, doc_id))
    assert out[-1]["type"] == "done" and emb.embedded == []
    # another passage size is new text: embedded, and only what is new
    out = list(reindex_document(store, emb, book_settings, doc_id, target=900, overlap=100))
    assert out[-1]["type"] == "done" and len(emb.embedded) > 0
    assert len(emb.embedded) == embedding_events(out)[-1]["total"]


def test_a_resaved_copy_is_not_rechunked_page_after_page(
    store, book_settings, local_embedder, monkeypatch
):
    """Reading looks ahead (cleans and chunks the text so far) every EARLY_EMBED_EVERY_CHARS
    to embed settled passages early; for a copy whose passages the cache already holds, each
    look ahead that finds nothing new doubles the distance to the next, so the copy's reading
    is not quadratic in its length (the book benchmark's re-saved copy: 27 s -> 4 s)."""
    from marginalia_core.ingest import pipeline

    monkeypatch.setattr(pipeline, "EARLY_EMBED_EVERY_CHARS", 2_000)  # many look aheads
    looks = []
    chunk_text = pipeline.chunk_text
    monkeypatch.setattr(pipeline, "chunk_text",
                        lambda *a, **k: looks.append(1) or chunk_text(*a, **k))
    emb = CountingEmbedder(local_embedder)
    data = running_head_book(30)
    assert follow(ingest_bytes(store, emb, book_settings, "book.pdf", data))["type"] == "done"
    first = len(looks)
    looks.clear()
    emb.embedded.clear()
    out = follow(ingest_bytes(store, emb, replace(book_settings, on_duplicate="replace"),
                              "book (copy).pdf", resaved(data)))
    assert out is not None and out["type"] == "done" and emb.embedded == []
    assert first >= 10, first  # the first reading looked ahead all along ...
    assert len(looks) * 2 < first, (len(looks), first)  # ... the copy's far less often


def test_another_embedder_never_reuses_the_cache(store, book_settings, local_embedder):
    """The cache is keyed by the embedder: the same text under another key is embedded."""
    emb = CountingEmbedder(local_embedder)
    data = running_head_book(4)
    assert follow(ingest_bytes(store, emb, book_settings, "a.pdf", data))["type"] == "done"

    class Other(CountingEmbedder):
        key = "another-model@384"
        model = "another-model"

    other = Other(local_embedder)
    end = follow(ingest_bytes(store, other, book_settings, "a.pdf", data))
    assert end is not None and end["type"] == "done"
    assert len(other.embedded) == len(emb.embedded) > 0


@pytest.mark.both_backends  # the cache is a store table: each backend's own
def test_a_resumed_job_embeds_only_what_it_had_not(store, book_settings, local_embedder):
    """A job stopped mid-embedding (the process shutting down) is interrupted; resumed, it
    embeds only the passages it had not embedded before."""
    settings = replace(book_settings, embed_while_reading=False)
    emb = CountingEmbedder(local_embedder)
    queue = JobQueue(store, settings, lambda: emb)
    [job] = queue.submit([Upload("book.pdf", running_head_book(40))], running=True)

    def stop_after_a_slice() -> bool:
        return len(emb.embedded) > 0

    out = list(queue.run(job.id, should_stop=stop_after_a_slice))
    assert out[-1]["type"] == "error" and out[-1]["reason"] == JobInterruptedError.reason
    assert queue.job(job.id).status == "interrupted"
    before = len(emb.embedded)
    assert before > 0
    emb.embedded.clear()

    [again] = queue.resume(job.id)
    claimed = queue.claim()
    assert claimed is not None and claimed.id == again.id
    out = list(queue.run(claimed.id))
    assert out[-1]["type"] == "done", out[-1]
    chunks = store.document_chunks(out[-1]["document"]["id"])
    texts = {c.content for c in chunks}
    assert len(emb.embedded) == len(texts) - before
    last = embedding_events(out)[-1]
    assert last["cached"] == before and last["done"] == last["total"] == len(texts) - before
