"""Concurrency: threads ingesting, deleting, re-indexing, searching and chatting against one SQLite
file, the way the Streamlit app runs (one Workspace shared by every session's thread) plus a
second ``Store`` on the same file standing for another session or a CLI process.

What must hold:

* no "database is locked" (nor any other error) ever surfaces: every exception and every
  ``error`` event of every thread is collected, and the list must be empty;
* counts stay consistent: ``documents.chunk_count`` equals the stored chunks, FTS rows equal
  chunk rows, every conversation's messages are complete user/assistant pairs;
* the in-memory matrix never serves a deleted document. Races make "deleted" a matter of time,
  so it is asserted with timestamps: the deleter records when each delete had *returned*
  (committed); a search whose hit names a document deleted before that search *started* is a
  violation. At the matrix level (``VectorIndex.search``), chunk ids are checked against their
  recorded lifetimes (born no later than the insert call, dead no earlier than the delete or
  re-index returned): an id none of whose lifetimes overlaps the query is a violation.

The soak runs ``SOAK_SECONDS`` (env ``MARGINALIA_SOAK_SECONDS``, default 60) and is slow; the fast
tests are deterministic race injections at the exact point where a stale matrix meets the
database.
"""

from __future__ import annotations

import os
import random
import threading
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from marginalia_core.chat.engine import ChatEngine
from marginalia_core.ingest.pipeline import ingest_bytes, reindex_document
from marginalia_core.retrieval.retriever import Retriever
from marginalia_core.store import open_store
from marginalia_core.store.base import LibraryStore as Store

pytestmark = pytest.mark.both_backends

SOAK_SECONDS = float(os.environ.get("MARGINALIA_SOAK_SECONDS", "60"))
THREADS = 8
SMALL_CHUNKS = {"chunk_target": 300, "chunk_overlap": 50}
TOPICS = [
    "scribes copying manuscripts by candlelight", "readers writing glosses in the margins",
    "bookbinders sewing quires with linen thread", "librarians cataloguing rare folios",
    "printers setting movable type in a workshop", "monks illuminating initials with gold leaf",
    "students annotating textbooks with pencil", "collectors restoring water damaged vellum",
]
QUESTIONS = [f"What do we know about {t}?" for t in TOPICS] + [
    "Who wrote in the margins?", "How were books bound?", "What is vellum?",
]
WORDS = [
    "margin", "gloss", "ink", "quill", "folio", "codex", "vellum", "binding", "scribe", "reader",
    "archive", "page", "spine", "leaf", "parchment", "library", "annotation", "commentary",
]


def doc_text(topic: str, serial: int, rng: random.Random) -> bytes:
    sentences = [
        f"Document {serial} is about {topic}.",
        *(f"{' '.join(rng.choice(WORDS) for _ in range(12)).capitalize()} number {serial}-{i}."
          for i in range(8)),
        f"In short, {topic} mattered a great deal.",
    ]
    return "\n\n".join(" ".join(sentences[i: i + 3]) for i in range(0, len(sentences), 3)).encode()


@dataclass
class Lifetime:
    doc_id: str
    born_before: float  # monotonic time before the call that created the chunk
    died_after: float | None = None  # monotonic time after the call that removed it returned


@dataclass
class Ledger:
    """Thread-safe record of what happened when."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    errors: list[str] = field(default_factory=list)
    ops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    deleted_after: dict[str, float] = field(default_factory=dict)  # doc id -> time
    chunks: dict[int, list[Lifetime]] = field(default_factory=lambda: defaultdict(list))
    hits: list[tuple[float, float, str, list[str]]] = field(default_factory=list)
    matrix_hits: list[tuple[float, float, list[int]]] = field(default_factory=list)
    exchanges: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    deleted_conversations: set[str] = field(default_factory=set)

    def error(self, where: str, what: str) -> None:
        with self.lock:
            self.errors.append(f"{where}: {what}")

    def count(self, op: str) -> None:
        with self.lock:
            self.ops[op] += 1

    def born(self, doc_id: str, chunk_ids: list[int], when: float) -> None:
        with self.lock:
            for cid in chunk_ids:
                self.chunks[cid].append(Lifetime(doc_id, when))

    def died(self, doc_id: str, chunk_ids: list[int], when: float) -> None:
        with self.lock:
            for cid in chunk_ids:
                for life in self.chunks[cid]:
                    if life.doc_id == doc_id and life.died_after is None:
                        life.died_after = when


def matrix_violations(ledger: Ledger) -> list[str]:
    out = []
    for started, ended, chunk_ids in ledger.matrix_hits:
        for cid in chunk_ids:
            lives = ledger.chunks.get(cid, [])
            if not any(life.born_before < ended and
                       (life.died_after is None or life.died_after > started) for life in lives):
                out.append(f"chunk {cid} served by the matrix at {started:.3f}-{ended:.3f}; "
                           f"lifetimes {lives}")
    return out


def hit_violations(ledger: Ledger) -> list[str]:
    out = []
    for started, _ended, where, doc_ids in ledger.hits:
        for doc_id in doc_ids:
            gone = ledger.deleted_after.get(doc_id)
            if gone is not None and gone < started:
                out.append(f"{where}: document {doc_id} deleted at {gone:.3f} was a hit of a "
                           f"query started at {started:.3f}")
    return out


def check_consistency(store: Store, ledger: Ledger) -> dict[str, int]:
    report = store.integrity_report()
    assert report == {"integrity": "ok", "mismatched_documents": [],
                      "chunks_without_embedding": 0, "orphan_chunks": 0}, report
    conn = store.conn
    chunks = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    if store.backend == "sqlite":  # the FTS5 shadow tables (PostgreSQL's tsvector is a column)
        assert conn.execute("SELECT COUNT(*) FROM chunks_fts_docsize").fetchone()[0] == chunks
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
    orphans = conn.execute(
        "SELECT COUNT(*) FROM messages WHERE conversation_id NOT IN (SELECT id FROM conversations)"
    ).fetchone()[0]
    assert orphans == 0
    for conv in store.list_conversations():
        roles = [m.role for m in store.messages(conv.id)]
        assert roles and roles == ["user", "assistant"] * (len(roles) // 2), (conv, roles)
        assert len(roles) == 2 * ledger.exchanges[conv.id], conv
    for cid in ledger.exchanges:
        if cid in ledger.deleted_conversations:
            assert not store.messages(cid)
    return {"documents": len(store.list_documents()), "chunks": chunks,
            "conversations": len(store.list_conversations())}


# ---------------------------------------------------------------------------------- the soak

@pytest.mark.slow
@pytest.mark.timeout(int(SOAK_SECONDS) + 240)
def test_eight_threads_soak_one_database(workspace):
    ws = workspace
    small = ws.settings.with_overrides(**SMALL_CHUNKS)
    other = open_store(ws.settings)  # another session / a CLI process on the same file
    other_retriever = Retriever(other, ws.embedder, ws.settings)
    other_chat = ChatEngine(other, other_retriever, ws.answerer, ws.settings)
    ledger = Ledger()
    published: list[str] = []  # documents the deleter may take
    published_lock = threading.Lock()
    rng0 = random.Random(5)

    base: list[str] = []
    for i, topic in enumerate(TOPICS):
        started = time.monotonic()
        events = list(ingest_bytes(ws.store, ws.embedder, small, f"base-{i}.md",
                                   doc_text(topic, i, rng0)))
        assert events[-1]["type"] == "done", events[-1]
        doc_id = events[-1]["document"]["id"]
        ledger.born(doc_id, [c.id for c in ws.store.document_chunks(doc_id)], started)
        base.append(doc_id)
    query_vectors = [ws.embedder.embed_query(q) for q in QUESTIONS]
    ws.retriever.search(QUESTIONS[0])  # warm
    stop_at = time.monotonic() + SOAK_SECONDS
    serial = iter(range(1000, 10**6))
    serial_lock = threading.Lock()

    def guarded(name):
        def wrap(fn):
            def run():
                rng = random.Random(name)
                while time.monotonic() < stop_at:
                    try:
                        fn(rng)
                    except Exception as exc:  # noqa: BLE001 - every failure is a finding
                        ledger.error(name, f"{type(exc).__name__}: {exc}\n"
                                           f"{traceback.format_exc(limit=4)}")
                        time.sleep(0.05)
            return threading.Thread(target=run, name=name, daemon=True)
        return wrap

    def ingester(store: Store, label: str):
        def step(rng):
            with serial_lock:
                n = next(serial)
            started = time.monotonic()
            events = list(ingest_bytes(store, ws.embedder, small, f"{label}-{n}.md",
                                       doc_text(rng.choice(TOPICS), n, rng)))
            last = events[-1]
            if last["type"] == "error":
                ledger.error(label, last["message"])
                return
            doc_id = last["document"]["id"]
            ledger.born(doc_id, [c.id for c in store.document_chunks(doc_id)], started)
            with published_lock:
                published.append(doc_id)
            ledger.count("ingest")
        return step

    def deleter(rng):
        time.sleep(0.2)
        if rng.random() < 0.15:  # re-index a base document in place (new chunk ids)
            doc_id = rng.choice(base)
            old = [c.id for c in ws.store.document_chunks(doc_id)]
            started = time.monotonic()
            target = rng.choice([250, 300, 350])
            events = list(reindex_document(ws.store, ws.embedder, small, doc_id, target=target,
                                           overlap=40))
            if events[-1]["type"] == "error":
                ledger.error("reindex", events[-1]["message"])
                return
            ledger.died(doc_id, old, time.monotonic())
            ledger.born(doc_id, [c.id for c in ws.store.document_chunks(doc_id)], started)
            ledger.count("reindex")
            return
        with published_lock:
            if len(published) < 2:
                return
            doc_id = published.pop(rng.randrange(len(published)))
        chunk_ids = [c.id for c in ws.store.document_chunks(doc_id)]
        store = ws.store if rng.random() < 0.5 else other
        assert store.delete_document(doc_id)
        gone = time.monotonic()
        with ledger.lock:
            ledger.deleted_after[doc_id] = gone
        ledger.died(doc_id, chunk_ids, gone)
        ledger.count("delete")

    def searcher(retriever: Retriever, label: str, modes: list[str]):
        def step(rng):
            query = rng.choice(QUESTIONS)
            mode = rng.choice(modes)
            started = time.monotonic()
            hits = retriever.search(query, mode=mode)
            ended = time.monotonic()
            with ledger.lock:
                ledger.hits.append((started, ended, label, [h.document_id for h in hits]))
            ledger.count("search")
            if mode != "lexical" and hits:  # a hit's score is its own chunk's cosine
                qvec = query_vectors[QUESTIONS.index(query)]
                ids = [h.chunk_id for h in hits]
                owners = retriever.store.chunks_by_ids(ids)
                own = {c: (owners[c]["document_id"], float(v @ qvec))
                       for c, v in zip(*retriever.store.vectors_by_ids(ids)) if c in owners}
                for h in hits:
                    doc_id, cosine = own.get(h.chunk_id, (None, None))
                    if doc_id == h.document_id and abs(cosine - h.score) > 1e-3:
                        ledger.error(label, f"mislabelled hit: {h.document_name} shows score "
                                            f"{h.score:.3f}, its own cosine is {cosine:.3f}")
                ledger.count("score_check")
            if rng.random() < 0.5:  # the matrix itself, under the Retriever
                started = time.monotonic()
                scored = retriever.index.search(rng.choice(query_vectors), k=25)
                ended = time.monotonic()
                assert len(scored.chunk_ids) == len(scored.scores)
                with ledger.lock:
                    ledger.matrix_hits.append((started, ended, scored.chunk_ids.tolist()))
                ledger.count("matrix")
            if rng.random() < 0.1:  # the Inspector's table
                retriever.score_table(query)
                ledger.count("score_table")
        return step

    def chatter(engine: ChatEngine, store: Store, label: str):
        def step(rng):
            cid = None
            for turn in range(rng.choice([1, 2, 3])):
                started = time.monotonic()
                question = rng.choice(QUESTIONS) if turn == 0 else "And what else about that?"
                events = list(engine.ask(question, cid))
                ended = time.monotonic()
                last = events[-1]
                if last["type"] == "error":
                    ledger.error(label, last["message"])
                    return
                meta = events[0]
                with ledger.lock:
                    ledger.hits.append((started, ended, label,
                                        [s["document_id"] for s in meta["sources"]]))
                    ledger.exchanges[last["conversation_id"]] += 1
                cid = last["conversation_id"]
                ledger.count("chat")
            if rng.random() < 0.3:
                assert store.delete_conversation(cid)
                with ledger.lock:
                    ledger.deleted_conversations.add(cid)
                ledger.count("delete_conversation")
        return step

    threads = [
        guarded("ingest-shared")(ingester(ws.store, "shared")),
        guarded("ingest-other")(ingester(other, "other")),
        guarded("delete-reindex")(deleter),
        guarded("search-hybrid")(searcher(ws.retriever, "search-hybrid", ["hybrid"])),
        guarded("search-dense")(searcher(ws.retriever, "search-dense", ["dense", "lexical"])),
        guarded("search-other")(searcher(other_retriever, "search-other", ["hybrid", "dense"])),
        guarded("chat-shared")(chatter(ws.chat, ws.store, "chat-shared")),
        guarded("chat-other")(chatter(other_chat, other, "chat-other")),
    ]
    assert len(threads) == THREADS
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=SOAK_SECONDS + 180)
        assert not t.is_alive(), f"{t.name} hung"
    elapsed = time.monotonic() - started

    locked = [e for e in ledger.errors if "locked" in e.lower() or "busy" in e.lower()]
    assert not locked, locked[:3]
    assert ledger.errors == [], ledger.errors[:5]
    assert hit_violations(ledger) == []
    assert matrix_violations(ledger) == []
    final = check_consistency(ws.store, ledger)
    check_consistency(other, ledger)
    total = sum(ledger.ops.values())
    figures = {"seconds": round(elapsed, 1), "ops": dict(ledger.ops), "total_ops": total,
               "ops_per_s": round(total / elapsed, 1), "errors": len(ledger.errors),
               "checked_hits": sum(len(h[3]) for h in ledger.hits),
               "checked_matrix_ids": sum(len(h[2]) for h in ledger.matrix_hits), **final}
    print(f"\n[concurrency figures] {figures}")
    assert ledger.ops["ingest"] >= 2 and ledger.ops["delete"] >= 1 and ledger.ops["chat"] >= 2
    assert ledger.ops["search"] >= 10
    other.close()


# --------------------------------------------------------------- deterministic race injections

def _ingest(store, embedder, settings, name, text):
    events = list(ingest_bytes(store, embedder, settings, name, text.encode()))
    assert events[-1]["type"] == "done", events[-1]
    return events[-1]["document"]


def test_deleted_document_is_never_served_by_a_stale_matrix(workspace):
    """Another session deletes a document after this session's matrix was loaded: the very
    next query (started after the delete returned) must not return it."""
    ws = workspace
    other = open_store(ws.settings)
    keep = _ingest(ws.store, ws.embedder, ws.settings, "keep.md",
                   "Bookbinders sew quires together with linen thread.")
    gone = _ingest(ws.store, ws.embedder, ws.settings, "gone.md",
                   "Scribes wrote glosses in the margins of manuscripts.")
    assert {h.document_id for h in ws.retriever.search("glosses in the margins", threshold=0)} \
        >= {gone["id"]}
    assert other.delete_document(gone["id"])  # another session, another connection
    for mode in ("dense", "hybrid", "lexical"):
        hits = ws.retriever.search("glosses in the margins", threshold=0, mode=mode)
        assert gone["id"] not in {h.document_id for h in hits}, mode
    scored = ws.retriever.index.search(ws.embedder.embed_query("glosses"), k=10)
    stored = {c.id for c in ws.store.document_chunks(keep["id"])}
    assert set(scored.chunk_ids.tolist()) <= stored
    other.close()


def test_chunk_ids_are_never_reused_after_a_delete(workspace):
    """A deleted document's chunk ids must not be handed to the next document: a matrix (or a
    saved source) holding the old id would otherwise point at someone else's text.
    (Fails until chunks.id is AUTOINCREMENT, see docs/RELIABILITY.md.)"""
    ws = workspace
    first = _ingest(ws.store, ws.embedder, ws.settings, "a.md", "Glosses in the margins. " * 5)
    first_ids = {c.id for c in ws.store.document_chunks(first["id"])}
    ws.store.delete_document(first["id"])
    second = _ingest(ws.store, ws.embedder, ws.settings, "b.md", "Bookbinding with thread. " * 5)
    second_ids = {c.id for c in ws.store.document_chunks(second["id"])}
    assert first_ids.isdisjoint(second_ids), f"ids reused: {sorted(first_ids & second_ids)}"


def test_search_racing_delete_and_reinsert_never_mislabels_a_hit(workspace, monkeypatch):
    """The matrix is scored, then -- before the hits are looked up -- another session deletes the
    document and indexes a new one. Every hit returned must be what its score says: the cosine
    of the query and *that* chunk's own stored vector (or the hit is dropped).
    (Fails until chunk ids are never reused, see test_chunk_ids_are_never_reused_after_a_delete.)"""
    ws = workspace
    other = open_store(ws.settings)
    gone = _ingest(ws.store, ws.embedder, ws.settings, "gone.md",
                   "Scribes wrote glosses in the margins of manuscripts.")
    query = "glosses in the margins of manuscripts"
    ws.retriever.search(query, threshold=0)  # the matrix now holds gone.md's chunk
    real = ws.store.chunks_by_ids
    fired = []

    def racing_lookup(ids):
        if not fired:
            fired.append(True)
            other.delete_document(gone["id"])
            _ingest(other, ws.embedder, ws.settings, "new.md",
                    "Printers set movable type in a busy workshop.")
        return real(ids)

    monkeypatch.setattr(ws.store, "chunks_by_ids", racing_lookup)
    qvec = ws.embedder.embed_query(query)
    hits = ws.retriever.search(query, threshold=0, mode="dense")
    monkeypatch.undo()
    assert fired
    for hit in hits:
        own = float(ws.store.vectors_by_ids([hit.chunk_id])[1][0] @ qvec)
        assert abs(own - hit.score) < 1e-4, (
            f"hit {hit.document_name!r} carries the score {hit.score:.3f} of a deleted chunk "
            f"(its own cosine is {own:.3f})")
    other.close()


def test_writers_on_two_connections_never_see_database_is_locked(workspace):
    """Short burst (always runs): two Stores, four writer threads, conversations and documents
    written at once; every write commits, none reports 'database is locked'."""
    ws = workspace
    other = open_store(ws.settings)
    errors, done = [], defaultdict(int)
    rng = random.Random(3)
    texts = [doc_text(t, i, rng) for i, t in enumerate(TOPICS)]
    vectors = ws.embedder.embed_documents([t.decode()[:300] for t in texts])

    def writer(store: Store, label: str, n: int):
        try:
            from marginalia_core.ingest.chunking import chunk_text

            for i in range(n):
                conv = store.create_conversation(f"{label} {i}")
                store.add_exchange(conv.id, conv.title, "q", "a [1]", [{"n": 1}])
                chunks = chunk_text(texts[i % len(texts)].decode()[:300] + f" {label}{i}")
                store.add_document(
                    name=f"{label}-{i}", mime="text/plain", size=1,
                    content_hash=f"{label}-{i}", embed_model=ws.embedder.model,
                    embed_dim=ws.embedder.dimension, chunks=chunks[:1],
                    embeddings=vectors[i % len(texts)][None, :], chunk_target=1400,
                    chunk_overlap=200,
                )
                done[label] += 1
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{label}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=writer, args=(s, f"{name}{k}", 25))
               for k in range(2) for s, name in ((ws.store, "shared"), (other, "other"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert sum(done.values()) == 100
    assert len(ws.store.list_documents()) == 100
    assert ws.store.integrity_report()["mismatched_documents"] == []
    other.close()
