"""The retrieval lab behind the Inspector: question sets, evaluation, sweeps, saved
configurations and A/B comparison, "why did this chunk rank", over one workspace's library.

Everything returns the dataclasses of ``retrieval.evaluation`` and ``retrieval.retriever`` so a
page can lay them out; nothing here imports Streamlit. Long runs (evaluate, chunk sweep) take a
``progress(event)`` callback and a ``cancel`` ``threading.Event``.

The chunk-size sweep re-chunks every document's stored text into a scratch index per grid point
(a temporary SQLite file, deleted afterwards) and embeds through a cache keyed by the text's hash
(``embedding_cache`` table, seeded from the library's own chunks), so a sweep only embeds text
no earlier run has seen.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from marginalia_core import events
from marginalia_core.errors import MarginaliaError
from marginalia_core.ingest.chunking import chunk_text, effective_overlap
from marginalia_core.ingest.embed_cache import EmbeddingCache
from marginalia_core.retrieval import evaluation as ev
from marginalia_core.retrieval import lexical
from marginalia_core.retrieval.retriever import Candidates, ExplainedChunk, Hit, Retriever
from marginalia_core.store import open_sqlite
from marginalia_core.store import question_sets as qs
from marginalia_core.store.base import LibraryStore

if TYPE_CHECKING:
    from marginalia_core.workspace import Workspace

CHUNK_GRID = ((800, 100), (1400, 200), (2000, 300))
EMBED_BATCH = 32  # texts embedded between two cancel checks / progress events
EXPLAIN_CACHE = 8  # recent queries whose candidates are kept for re-ranking


@dataclass(frozen=True)
class ChunkPoint:
    target: int
    overlap: int
    chunks: int
    embedded_now: int  # texts not found in the embedding cache
    result: ev.EvalResult


@dataclass(frozen=True)
class ChunkSweep:
    set_name: str
    best: tuple[int, int]
    points: list[ChunkPoint]
    key: str


class RetrievalLab:
    def __init__(self, workspace: Workspace):
        self.ws = workspace
        self.sets = qs.QuestionSets(workspace.store)
        self._explained: dict[tuple[str, int, str], Candidates] = {}
        self._lock = threading.Lock()
        self._last_embedded = 0

    @property
    def retriever(self) -> Retriever:
        return self.ws.retriever

    # -- question sets -------------------------------------------------------------------------

    def list_sets(self) -> list[qs.QuestionSetSummary]:
        return self.sets.list()

    def get_set(self, name: str) -> qs.QuestionSet:
        return self.sets.get(name)

    def save_set(self, qset: qs.QuestionSet, *, replace: bool = False) -> qs.QuestionSetSummary:
        return self.sets.save(qset, replace=replace)

    def delete_set(self, name: str) -> bool:
        return self.sets.delete(name)

    def import_set(
        self, path: str | Path, *, name: str, qrels: str | Path | None = None,
        replace: bool = False,
    ) -> qs.QuestionSetSummary:
        return self.sets.save(qs.read_file(path, name=name, qrels=qrels), replace=replace)

    def export_set(self, name: str, fmt: str = "jsonl") -> str:
        qset = self.sets.get(name)
        if fmt == "csv":
            return qs.write_csv(qset)
        if fmt == "jsonl":
            return "".join(line + "\n" for line in qs.write_jsonl(qset))
        raise qs.QuestionSetError(f"Unknown export format {fmt!r}: use jsonl or csv.")

    def import_upload(
        self, files: dict[str, bytes], *, name: str, replace: bool = False
    ) -> qs.QuestionSetSummary:
        """Import uploaded files (file name -> bytes): a ``.csv`` (question, document, page), a
        ``.jsonl`` export, or BEIR's ``queries.jsonl`` with a qrels ``.tsv``."""
        if not name.strip():
            raise qs.QuestionSetError("Give the imported question set a name.")
        if not files:
            raise qs.QuestionSetError("Choose a file to import.")
        folder = Path(tempfile.mkdtemp(prefix="marginalia-import-"))
        try:
            paths = {}
            for fname, data in files.items():
                path = folder / Path(fname).name
                path.write_bytes(data)
                paths[path.suffix.lower()] = path
            qrels = paths.get(".tsv")
            if qrels is not None:
                queries = paths.get(".jsonl")
                if queries is None:
                    raise qs.QuestionSetError(
                        "A BEIR import needs queries.jsonl next to the qrels .tsv file."
                    )
                return self.import_set(queries, name=name.strip(), qrels=qrels, replace=replace)
            if len(paths) != 1:
                raise qs.QuestionSetError(
                    "Import one .csv or .jsonl file, or a BEIR queries.jsonl with its .tsv."
                )
            return self.import_set(next(iter(paths.values())), name=name.strip(),
                                   replace=replace)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def add_question(
        self, set_name: str, question: str, chunk_ids: list[int], *, by: str = "span"
    ) -> qs.QuestionSetSummary:
        """The Inspector's "save": a question with the passages ticked as answering it,
        appended to ``set_name`` (created when new). Judgments keep the passages' document
        and span (or pages), so they outlive the chunk ids."""
        if not chunk_ids:
            raise qs.QuestionSetError("Tick at least one passage that answers the question.")
        rows = self.ws.store.chunks_by_ids(chunk_ids)
        missing = [c for c in chunk_ids if c not in rows]
        if missing:
            raise qs.QuestionSetError(
                "Some ticked passages no longer exist (the library was re-indexed); "
                "run the query again."
            )
        judgments = tuple(ev.judgments_for_chunk(rows[c], by=by) for c in chunk_ids)
        try:
            qset = self.sets.get(set_name)
        except qs.QuestionSetError:
            qset = qs.QuestionSet(set_name)
        ids = {q.id for q in qset.questions}
        n = len(qset.questions) + 1
        while f"q{n}" in ids:
            n += 1
        qset.questions.append(qs.Question(question, judgments, f"q{n}"))
        return self.sets.save(qset, replace=True)

    # -- evaluation and sweeps ---------------------------------------------------------------

    def default_config(self) -> ev.EvalConfig:
        return ev.EvalConfig(**self.ws.settings.retrieval.to_dict(),
                             embedder=self.embedder_key())

    def embedder_key(self) -> str:
        """The active embedder's key, or its model name while a model server is down."""
        try:
            return self.ws.embedder.key
        except MarginaliaError:  # a model server that is down: its key needs the dimension
            return self.ws.embedder.model

    def prepare(self, set_name: str, *, progress=None, cancel=None) -> ev.Prepared:
        return ev.prepare(self.retriever, self.sets.get(set_name), progress=progress,
                          cancel=cancel)

    def evaluate(
        self, set_name: str, config: ev.EvalConfig | None = None, *, progress=None, cancel=None
    ) -> ev.EvalResult:
        config = config or self.default_config()
        if self._needs_scratch(config):
            return self._scratch_eval(set_name, config, progress=progress, cancel=cancel)[0]
        return ev.evaluate_prepared(
            self.retriever, self.prepare(set_name, progress=progress, cancel=cancel), config
        )

    def threshold_sweep(
        self, set_name: str, *, mode: str | None = None, top_k: int | None = None,
        alpha: float | None = None, prepared: ev.Prepared | None = None,
    ) -> ev.ThresholdSweep:
        prepared = prepared or self.prepare(set_name)
        return ev.threshold_sweep(
            self.retriever, prepared, mode=mode, top_k=top_k, alpha=alpha,
        )

    def weight_sweep(
        self, set_name: str, base: ev.EvalConfig | None = None, *,
        prepared: ev.Prepared | None = None,
    ) -> ev.WeightSweep:
        prepared = prepared or self.prepare(set_name)
        return ev.weight_sweep(self.retriever, prepared, base or self.default_config())

    def chunk_sweep(
        self, set_name: str, grid=CHUNK_GRID, config: ev.EvalConfig | None = None, *,
        key: str = f"ndcg@{ev.NDCG_AT}", progress=None, cancel: threading.Event | None = None,
    ) -> ChunkSweep:
        """Evaluate ``set_name`` with each (target, overlap) of ``grid`` in a scratch index."""
        base = config or self.default_config()
        points = []
        for target, overlap in grid:
            cfg = replace(base, chunk_target=int(target), chunk_overlap=int(overlap))
            result, chunks, embedded = self._scratch_eval(
                set_name, cfg, progress=progress, cancel=cancel
            )
            points.append(ChunkPoint(int(target), effective_overlap(target, overlap), chunks,
                                     embedded, result))
        best = max(points, key=lambda p: p.result.metrics[key])
        return ChunkSweep(set_name, (best.target, best.overlap), points, key)

    # -- saved configurations and A/B ----------------------------------------------------------

    def save_config(self, name: str, config: ev.EvalConfig) -> None:
        self.sets.save_config(name, config.to_dict())

    def configs(self) -> dict[str, ev.EvalConfig]:
        return {n: ev.EvalConfig.from_dict(d) for n, d in self.sets.configs().items()}

    def config(self, name: str) -> ev.EvalConfig:
        return ev.EvalConfig.from_dict(self.sets.config(name))

    def apply(self, config: ev.EvalConfig) -> Iterator[events.IngestEvent]:
        """"Apply to Chat": the configuration becomes this library's retrieval settings (saved
        in the database); documents chunked otherwise are re-indexed (the events of each)."""
        applied = {k: v for k, v in config.to_dict().items() if k != "embedder"}
        return self.ws.apply_settings(applied)

    def applied(self) -> ev.EvalConfig:
        """The configuration Chat uses now (the applied settings over the defaults)."""
        return self.default_config()

    def resolved(self, config: ev.EvalConfig) -> ev.EvalConfig:
        """``config`` with every ``None`` spelled out (the threshold, fusion weight and passage
        size it stands for, the overlap clamped as chunking clamps it): what it does."""
        return replace(
            config,
            threshold=round(self.retriever.threshold_of(config), 4),
            alpha=round(self.retriever.alpha_of(config), 4),
            chunk_overlap=effective_overlap(config.chunk_target, config.chunk_overlap),
        )

    def same_effect(self, a: ev.EvalConfig, b: ev.EvalConfig) -> bool:
        """Whether two configurations retrieve alike (the fusion weight counts in hybrid
        only; the embedder is the active one for both)."""
        ra, rb = self.resolved(a), self.resolved(b)
        if ra.mode != "hybrid":
            rb = replace(rb, alpha=ra.alpha)
        return replace(ra, embedder=None) == replace(rb, embedder=None)

    def keyword_weight(self, config: ev.EvalConfig) -> float:
        """The Inspector's "keyword weight" of a configuration: 1 - its fusion weight."""
        return round(1.0 - float(self.resolved(config).alpha or 0.0), 4)

    @staticmethod
    def query_terms(query: str) -> list[str]:
        """The words of ``query`` keyword search matches (to highlight in a passage)."""
        return lexical.query_terms(query)

    def compare(
        self, set_name: str, a: str | ev.EvalConfig, b: str | ev.EvalConfig, *, progress=None,
        cancel=None,
    ) -> ev.Comparison:
        """A against B on one set: metrics and per question rank shifts, gained and lost
        judgments. Configurations name saved ones or are given directly."""
        ca = self.config(a) if isinstance(a, str) else a
        cb = self.config(b) if isinstance(b, str) else b
        prepared = None
        results = []
        for cfg in (ca, cb):
            if self._needs_scratch(cfg):
                results.append(self._scratch_eval(set_name, cfg, progress=progress,
                                                  cancel=cancel)[0])
            else:
                prepared = prepared or self.prepare(set_name, progress=progress, cancel=cancel)
                results.append(ev.evaluate_prepared(self.retriever, prepared, cfg))
        return ev.compare(*results)

    # -- why a chunk ranked ---------------------------------------------------------------------

    def explain(
        self, query: str, *, threshold: float | None = None, alpha: float | None = None
    ) -> list[ExplainedChunk]:
        """The score table for ``query``: per candidate cosine, BM25, fused score and its rank
        in each list. Moving ``alpha`` (the keyword weight is 1 - alpha) re-ranks the cached
        candidates without embedding the query again."""
        return self.retriever.explain(query, threshold=threshold, alpha=alpha,
                                      cands=self._candidates(query))

    def query_alpha(self, query: str, alpha: float | None = None) -> float:
        """The dense weight hybrid mode uses for ``query`` (``alpha`` adapted to the query)."""
        return self._candidates(query).query_alpha(alpha)

    def search(
        self, query: str, *, mode: str | None = None, threshold: float | None = None,
        k: int | None = None, alpha: float | None = None,
    ) -> list[Hit]:
        """What search returns with these settings, from the same cached candidates as
        ``explain`` (moving a control embeds nothing again)."""
        config = self.retriever.config(mode=mode, threshold=threshold, top_k=k, alpha=alpha)
        return self.retriever.retrieve(self._candidates(query), config)

    def _candidates(self, query: str) -> Candidates:
        key = (query, self.ws.store.generation(), self.ws.embedder.key)
        with self._lock:
            cands = self._explained.get(key)
        if cands is None:
            cands = self.retriever.candidates(query)
            with self._lock:
                if len(self._explained) >= EXPLAIN_CACHE:
                    self._explained.pop(next(iter(self._explained)))
                self._explained[key] = cands
        return cands

    # -- scratch indexes ----------------------------------------------------------------------

    def _needs_scratch(self, cfg: ev.EvalConfig) -> bool:
        target, overlap = cfg.chunk_target, cfg.chunk_overlap
        docs = self.ws.store.list_documents()
        return any(
            (d["chunk_target"], d["chunk_overlap"])
            != (target, effective_overlap(target, overlap))
            for d in docs
        )

    def _scratch_eval(
        self, set_name: str, cfg: ev.EvalConfig, *, progress=None, cancel=None
    ) -> tuple[ev.EvalResult, int, int]:
        qset = self.sets.get(set_name)
        s = self.ws.settings
        target, overlap = cfg.chunk_target, cfg.chunk_overlap
        folder = Path(tempfile.mkdtemp(prefix="marginalia-sweep-"))
        scratch = open_sqlite(folder / "scratch.db")
        try:
            chunks, embedded = self._build_scratch(
                scratch, target, overlap, progress=progress, cancel=cancel
            )
            retriever = Retriever(scratch, self.ws.embedder, s)
            prepared = ev.prepare(retriever, qset, progress=progress, cancel=cancel)
            return ev.evaluate_prepared(retriever, prepared, cfg), chunks, embedded
        finally:
            scratch.close()
            shutil.rmtree(folder, ignore_errors=True)

    def _build_scratch(
        self, scratch: LibraryStore, target: int, overlap: int, *, progress=None, cancel=None
    ) -> tuple[int, int]:
        store, emb = self.ws.store, self.ws.embedder
        docs = [d for d in store.list_documents()
                if (d["embed_model"], d["embed_dim"]) == (emb.model, emb.dimension)]
        planned = []
        for d in docs:
            text, starts = store.document_source(d["id"])
            planned.append((d, text, starts,
                            chunk_text(text, target=target, overlap=overlap, page_starts=starts)))
        texts = sorted({c.text for *_, cs in planned for c in cs})
        vectors = self._cached_vectors(texts, target, overlap, progress=progress, cancel=cancel)
        for d, text, starts, cs in planned:
            scratch.add_document(
                name=d["name"], mime=d["mime"], size=d["size"], content_hash=d["content_hash"],
                embed_model=emb.model, embed_dim=emb.dimension, chunks=cs,
                embeddings=np.array([vectors[c.text] for c in cs], dtype=np.float32).reshape(
                    len(cs), emb.dimension),
                page_count=d["page_count"], chunk_target=target,
                chunk_overlap=effective_overlap(target, overlap), text=text, page_starts=starts,
                document_id=d["id"],
            )
        return sum(len(cs) for *_, cs in planned), self._last_embedded

    def _cached_vectors(
        self, texts: list[str], target: int, overlap: int, *, progress=None, cancel=None
    ) -> dict[str, np.ndarray]:
        """Vectors of ``texts``: from the library's embedding cache (which ingestion fills),
        the rest embedded now in batches and cached as each batch is done."""
        cache = EmbeddingCache(self.ws.store, self.ws.embedder.key)
        out = cache.lookup(texts)
        missing = [t for t in texts if t not in out]
        self._last_embedded = len(missing)
        for start in range(0, len(missing), EMBED_BATCH):
            if cancel is not None and cancel.is_set():
                raise ev.Cancelled()
            batch = missing[start : start + EMBED_BATCH]
            new = dict(zip(batch, self.ws.embedder.embed_documents(batch), strict=True))
            cache.add(new)
            out.update(new)
            if progress:
                progress({"type": "progress", "stage": "embed", "target": target,
                          "overlap": overlap, "done": start + len(batch), "total": len(missing)})
        return out
