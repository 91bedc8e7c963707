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

import math
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from marginalia_core import events
from marginalia_core.chat import answer_metrics as am
from marginalia_core.errors import MarginaliaError
from marginalia_core.ingest.chunking import chunk_text, effective_overlap
from marginalia_core.ingest.embed_cache import EmbeddingCache
from marginalia_core.retrieval import evaluation as ev
from marginalia_core.retrieval import lexical, rerank
from marginalia_core.retrieval.retriever import Candidates, ExplainedChunk, Hit, Retriever
from marginalia_core.store import open_sqlite
from marginalia_core.store import question_sets as qs
from marginalia_core.store.base import LibraryStore
from marginalia_core.store.records import Document

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
    best: tuple[int, int]  # the suggested size: best ``key`` keeping recall >= ``floor``
    points: list[ChunkPoint]
    key: str
    current: tuple[int, int] = (0, 0)
    floor: float = 0.0

    def at(self, size: tuple[int, int]) -> ChunkPoint:
        return next(p for p in self.points if (p.target, p.overlap) == size)


@dataclass(frozen=True)
class Tuning:
    """Whether Chat retrieves with settings other than the defaults, and which saved
    configuration they are (what Chat's "tuned settings" note says)."""

    tuned: bool
    config: str | None = None  # the saved configuration the applied settings match
    changes: tuple[str, ...] = ()  # e.g. "threshold 0.42 (default 0.35)"


@dataclass(frozen=True)
class MissReport:
    """"Why wasn't it found?" for one judged passage a configuration missed: where the passage
    ranks in each list, which setting dropped it, and the setting that would include it."""

    question: str
    judgment: str  # the judgment's label (document, pages)
    reason: str  # one of MISS_REASONS
    explanation: str
    document: str = ""
    mime: str = ""
    page_start: int | None = None
    page_end: int | None = None
    content: str = ""  # the passage that answers, in full ("" when no passage holds it)
    cosine: float | None = None
    dense_rank: int | None = None  # by meaning, among every passage of the library
    bm25: float | None = None
    bm25_rank: int | None = None  # by keywords (None: no word of the question in it)
    fused_rank: int | None = None  # in the configuration's own order, before the threshold
    rank: int | None = None  # rank among what the configuration returns, None = dropped
    fix: ev.EvalConfig | None = None  # the configuration that would include it
    fix_label: str = ""  # what the fix changes, e.g. "threshold 0.28"


# Which setting kept a judged passage out of the passages returned
MISS_REASONS = ("found", "threshold", "top_k", "fusion_weight", "mode", "document_scope",
                "passage_boundary")
MAX_FIX_TOP_K = 50  # the Inspector's largest "passages returned"


@dataclass(frozen=True)
class AnswerResult:
    """The answer metrics of a question set under one configuration (``chat.answer_metrics``),
    beside the retrieval metrics of the same run."""

    set_name: str
    config: ev.EvalConfig
    metrics: dict[str, float | None]
    answers: list[am.AnswerCheck]
    retrieval: ev.EvalResult
    answerer: str  # the model that answered

    def to_dict(self) -> dict[str, Any]:
        return {"set": self.set_name, "config": self.config.to_dict(),
                "answerer": self.answerer, "metrics": self.metrics,
                "retrieval": self.retrieval.metrics,
                "answers": [a.to_dict() for a in self.answers]}


@dataclass(frozen=True)
class JudgedPassage:
    """A judgment as a person reads it: its document, where in it, and the passage of the
    library that holds it, whole ("" for a whole-document judgment or one no passage holds)."""

    label: str
    document: str
    mime: str = ""
    page_start: int | None = None
    page_end: int | None = None
    content: str = ""


@dataclass(frozen=True)
class SweepCost:
    """What a passage-size sweep will embed, told before it starts."""

    sizes: int  # passage sizes the sweep tries
    passages: int  # passages of every size together
    to_embed: int  # of them, texts no earlier run has embedded
    characters: int  # characters to embed


def _shared(row: dict[str, Any], j: qs.Judgment) -> int:
    """Characters (span) or pages (page judgment) a passage shares with a judgment."""
    if j.level == "span":
        return min(int(row["end"]), int(j.span_end or 0)) - max(int(row["start"]),
                                                                 int(j.span_start or 0))
    last = j.page_end if j.page_end is not None else j.page_start
    return min(int(row["page_end"]), int(last or 0)) - max(int(row["page_start"]),
                                                          int(j.page_start or 0))


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

    def judged_passages(self, set_name: str) -> dict[str, JudgedPassage]:
        """Every judgment of ``set_name`` by its label, with the library passage that holds it
        (the one sharing most of its text), so a page can show it whole."""
        qset = self.sets.get(set_name)
        docs = {d.name: d for d in self.ws.store.list_documents()}
        chunks: dict[str, list[dict[str, Any]]] = {}
        out: dict[str, JudgedPassage] = {}
        for j in (j for q in qset.questions for j in q.judgments):
            if j.label in out:
                continue
            doc = docs.get(j.document)
            if doc is None or j.level == "document":
                out[j.label] = JudgedPassage(j.label, j.document, doc.mime if doc else "")
                continue
            if doc.id not in chunks:
                chunks[doc.id] = [{**r.to_dict(), "document_name": doc.name}
                                  for r in self.ws.store.document_chunks(doc.id)]
            rows = [r for r in chunks[doc.id] if j.matches(r)]
            best = max(rows, key=lambda r: _shared(r, j), default=None)
            out[j.label] = JudgedPassage(
                j.label, j.document, doc.mime,
                best["page_start"] if best else j.page_start,
                best["page_end"] if best else j.page_end,
                best["content"] if best else "",
            )
        return out

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
        current: float | None = None, floor: float | None = None,
    ) -> ev.ThresholdSweep:
        """Precision and recall at each threshold; the suggestion keeps recall at ``floor``
        (default: RECALL_FLOOR_SHARE of the recall at ``current``, Chat's threshold)."""
        prepared = prepared or self.prepare(set_name)
        return ev.threshold_sweep(
            self.retriever, prepared, mode=mode, top_k=top_k, alpha=alpha, current=current,
            floor=floor,
        )

    def weight_sweep(
        self, set_name: str, base: ev.EvalConfig | None = None, *,
        prepared: ev.Prepared | None = None, floor: float | None = None,
    ) -> ev.WeightSweep:
        prepared = prepared or self.prepare(set_name)
        return ev.weight_sweep(self.retriever, prepared, base or self.default_config(),
                               floor=floor)

    def _size_grid(self, grid, base: ev.EvalConfig) -> list[tuple[int, int]]:
        """``grid`` and ``base``'s own passage size, overlaps clamped as chunking clamps them."""
        now = self.resolved(base)
        sizes = {(int(t), effective_overlap(int(t), int(o))) for t, o in grid}
        sizes.add((int(now.chunk_target or 0), int(now.chunk_overlap or 0)))
        return sorted(sizes)

    def chunk_sweep_cost(
        self, grid=CHUNK_GRID, config: ev.EvalConfig | None = None
    ) -> SweepCost:
        """What ``chunk_sweep`` would embed (texts not in the embedding cache nor the library's
        own passages): shown before a sweep starts, since embedding is its whole cost."""
        texts: set[str] = set()
        passages = 0
        sizes = self._size_grid(grid, config or self.default_config())
        for target, overlap in sizes:
            for *_, cs in self._plan(target, overlap):
                passages += len(cs)
                texts.update(c.text for c in cs)
        missing = self._uncached(sorted(texts))
        return SweepCost(len(sizes), passages, len(missing), sum(len(t) for t in missing))

    def chunk_sweep(
        self, set_name: str, grid=CHUNK_GRID, config: ev.EvalConfig | None = None, *,
        key: str = f"ndcg@{ev.NDCG_AT}", progress=None, cancel: threading.Event | None = None,
        floor: float | None = None,
    ) -> ChunkSweep:
        """Evaluate ``set_name`` with each (target, overlap) of ``grid`` and the configuration's
        own size in a scratch index. The suggestion is the size of best ``key`` keeping recall
        at ``floor`` (default: RECALL_FLOOR_SHARE of the current size's); ties go to the
        current size."""
        base = config or self.default_config()
        now = self.resolved(base)
        current = (int(now.chunk_target or 0), int(now.chunk_overlap or 0))
        points = []
        for target, overlap in self._size_grid(grid, base):
            cfg = replace(base, chunk_target=target, chunk_overlap=overlap)
            if self._needs_scratch(cfg):
                result, chunks, embedded = self._scratch_eval(
                    set_name, cfg, progress=progress, cancel=cancel
                )
            else:
                result = self.evaluate(set_name, cfg, progress=progress, cancel=cancel)
                emb = self.ws.embedder
                chunks, embedded = self.ws.store.chunk_count(emb.model, emb.dimension), 0
            points.append(ChunkPoint(target, overlap, chunks, embedded, result))
        recall_key = f"recall@{base.top_k}"
        kept = ev.recall_floor(next(p for p in points if (p.target, p.overlap) == current)
                               .result.metrics[recall_key], floor)
        best = ev.suggest([((p.target, p.overlap), p.result.metrics[key],
                            p.result.metrics[recall_key]) for p in points], current, kept)
        return ChunkSweep(set_name, best, points, key, current, kept)

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
        if self.same_effect(config, self.defaults()):
            return self.ws.apply_settings({})  # the defaults again, not a copy of them
        applied = {k: v for k, v in config.to_dict().items() if k != "embedder"}
        return self.ws.apply_settings(applied)

    def applied(self) -> ev.EvalConfig:
        """The configuration Chat uses now (the applied settings over the defaults)."""
        return self.default_config()

    def defaults(self) -> ev.EvalConfig:
        """The configuration of the defaults (environment and built-in), every value spelled
        out: what "Reset to defaults" puts in the controls."""
        d = self.ws.defaults.retrieval
        threshold = self.ws.embedder.default_threshold if d.threshold is None else d.threshold
        return self.resolved(ev.EvalConfig(**{**d.to_dict(), "threshold": threshold,
                                              "alpha": Candidates.alpha_for(d.alpha)},
                                           embedder=self.embedder_key()))

    def tuning(self) -> Tuning:
        """How the applied settings differ from the defaults, and the saved configuration
        they match (the first by name, if several do)."""
        now, base = self.resolved(self.applied()), self.defaults()
        if self.same_effect(now, base):
            return Tuning(False)
        changes = []
        for name, field_ in (("method", "mode"), ("threshold", "threshold"),
                             ("passages returned", "top_k"), ("passage size", "chunk_target"),
                             ("overlap", "chunk_overlap")):
            a, b = getattr(now, field_), getattr(base, field_)
            if a != b:
                changes.append(f"{name} {a} (default {b})")
        if now.mode == "hybrid" and now.alpha != base.alpha:
            changes.append(f"keyword weight {self.keyword_weight(now):.2f} "
                           f"(default {self.keyword_weight(base):.2f})")
        match = next((n for n, c in self.configs().items() if self.same_effect(c, now)), None)
        return Tuning(True, match, tuple(changes))

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

    @staticmethod
    def rerankers() -> tuple[str, ...]:
        """The rerank step's providers by name, as registered ("none" first)."""
        return tuple(rerank.RERANKERS)

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

    # -- why a passage was missed -------------------------------------------------------------

    def why_missed(
        self, set_name: str, question_id: str, judgment: int | str, config: ev.EvalConfig
    ) -> MissReport:
        """Why judgment number ``judgment`` (of those with a grade) of a question was not among
        the passages ``config`` returns, ranked in the library's own index: the passage's
        meaning, keyword and fused ranks, the setting that dropped it (threshold, top-k,
        fusion weight, search method, document scope, passage boundary) and the nearest
        configuration that includes it."""
        qset = self.sets.get(set_name)
        question = next((q for q in qset.questions if q.id == question_id), None)
        if question is None:
            raise qs.QuestionSetError(f"No question {question_id!r} in {set_name!r}.")
        judged = [(i, j) for i, j in enumerate(question.judgments) if j.grade > 0]
        if isinstance(judgment, str):  # a label, as evaluation reports missed judgments
            judgment = next((n for n, (_, j) in enumerate(judged) if j.label == judgment), -1)
        if not 0 <= judgment < len(judged):
            raise qs.QuestionSetError(f"Question {question_id!r} has no judgment {judgment}.")
        index, j = judged[judgment]
        cfg = self.resolved(config)
        report = MissReport(question.text, j.label, "document_scope", "", document=j.document)
        docs = [d for d in self.ws.store.list_documents() if j.document in (d.name, d.id)]
        if not docs:
            return replace(report, explanation=f"No document named {j.document} is in the "
                           "library, so no search can find it.")
        doc = docs[0]
        report = replace(report, mime=doc.mime)
        if not self.retriever.is_searchable(doc):
            return replace(report, explanation=f"{doc.name} was indexed with another "
                           "embedder and is left out of search: re-index it.")
        rows = [{**r.to_dict(), "document_name": doc.name, "document_id": doc.id}
                for r in self.ws.store.document_chunks(doc.id)]
        matching = {r["id"]: r for r in rows if j.matches(r)}
        if not matching:
            return self._boundary_miss(report, j, cfg)
        emb = self.ws.embedder
        depth = self.ws.store.chunk_count(emb.model, emb.dimension)
        cands = self.retriever.candidates(question.text, limit=depth)
        explained = {r.chunk_id: r for r in self.retriever.explain(
            question.text, threshold=cfg.threshold, alpha=cfg.alpha, mode=cfg.mode,
            cands=cands)}
        order = {"hybrid": "fused_rank", "dense": "dense_rank", "lexical": "lexical_rank"}
        seen = [explained[c] for c in matching if c in explained]
        best = min(seen, key=lambda r: getattr(r, order[cfg.mode]) or 10**9) if seen else None
        if best is None:
            return replace(report, explanation="Neither search proposed any passage of it.")
        report = replace(
            report, page_start=best.page_start, page_end=best.page_end, content=best.content,
            cosine=best.cosine, dense_rank=best.dense_rank,
            bm25=best.bm25 if best.lexical_rank else None, bm25_rank=best.lexical_rank,
            fused_rank=getattr(best, order[cfg.mode]),
        )
        rank = self._unit_rank(cands, question, index, cfg)
        if rank is not None and rank <= cfg.top_k:
            return replace(report, reason="found", rank=rank, explanation=(
                f"These settings find it at rank {rank}."))
        return self._dropped(report, cands, question, index, cfg, rank)

    def _unit_rank(self, cands: Candidates, question: qs.Question, index: int,
                   cfg: ev.EvalConfig) -> int | None:
        """Rank of the first unit holding judgment ``index`` under ``cfg`` (threshold and all),
        as evaluation ranks units; None when it is not in the first ``ev.DEPTH``."""
        hits = self.retriever.retrieve(cands, cfg, top_k=False)
        units = ev.rank_units(hits, question)
        return next((n for n, (_, m) in enumerate(units, 1) if index in m), None)

    def _dropped(self, report: MissReport, cands: Candidates, question: qs.Question,
                 index: int, cfg: ev.EvalConfig, rank: int | None) -> MissReport:
        k = cfg.top_k
        below = report.cosine is not None and report.cosine < float(cfg.threshold or 0.0)
        if cfg.mode != "lexical" and rank is None and below:
            lower = math.floor(float(report.cosine or 0.0) * 100) / 100
            fix = replace(cfg, threshold=max(-1.0, lower))
            new_rank = self._unit_rank(cands, question, index, fix)
            label = f"threshold {fix.threshold:.2f}"
            if new_rank is not None and k < new_rank <= MAX_FIX_TOP_K:
                fix, label = replace(fix, top_k=new_rank), f"{label} and {new_rank} returned"
            return replace(report, reason="threshold", rank=rank, fix=fix, fix_label=label,
                           explanation=f"Its cosine {report.cosine:.3f} is under the "
                           f"relevance threshold {cfg.threshold:.2f}.")
        if cfg.mode == "hybrid":
            for a in sorted(ev.WEIGHT_GRID, key=lambda a: abs(a - float(cfg.alpha or 0.0))):
                trial = replace(cfg, alpha=a)
                r = self._unit_rank(cands, question, index, trial)
                if r is not None and r <= k:
                    return replace(
                        report, reason="fusion_weight", rank=rank, fix=trial,
                        fix_label=f"keyword weight {self.keyword_weight(trial):.2f}",
                        explanation=f"It ranks {self._place(rank)} with the keyword weight "
                        f"{self.keyword_weight(cfg):.2f}; another weight puts it in the "
                        f"first {k}.")
        if rank is not None and rank <= MAX_FIX_TOP_K:
            return replace(report, reason="top_k", rank=rank,
                           fix=replace(cfg, top_k=rank), fix_label=f"{rank} returned",
                           explanation=f"It ranks {rank}, after the {k} passages returned.")
        other = "hybrid" if cfg.mode != "hybrid" else "dense"
        trial = replace(cfg, mode=other)
        r = self._unit_rank(cands, question, index, trial)
        if r is not None and r <= MAX_FIX_TOP_K:
            fix = replace(trial, top_k=max(k, r))
            return replace(report, reason="mode", rank=rank, fix=fix,
                           fix_label=f"{other} search" + (f", {r} returned" if r > k else ""),
                           explanation=f"The {cfg.mode} search ranks it {self._place(rank)}.")
        return replace(report, reason="top_k", rank=rank,
                       explanation=f"It ranks {self._place(rank)}: no setting of the lab "
                       "brings it near the top.")

    @staticmethod
    def _place(rank: int | None) -> str:
        return f"{rank}" if rank is not None else f"below the first {ev.DEPTH}"

    def _boundary_miss(self, report: MissReport, j: qs.Judgment,
                       cfg: ev.EvalConfig) -> MissReport:
        span = int((j.span_end or 0) - (j.span_start or 0))
        target = int(cfg.chunk_target or 0)
        bigger = max(target + 200, -(-2 * span // 100) * 100)
        fix = replace(cfg, chunk_target=bigger)
        return replace(report, reason="passage_boundary", fix=fix,
                       fix_label=f"passage size {bigger}",
                       explanation="No passage holds at least half of the judged text: the "
                       "passage boundaries split it.")

    # -- why a chunk ranked ---------------------------------------------------------------------

    def explain(
        self, query: str, *, threshold: float | None = None, alpha: float | None = None,
        mode: str | None = None,
    ) -> list[ExplainedChunk]:
        """The score table for ``query``: per candidate cosine, BM25, fused score and its rank
        in each list, and whether ``mode``'s threshold step keeps it. Moving ``alpha`` (the
        keyword weight is 1 - alpha) re-ranks the cached candidates without embedding the
        query again."""
        return self.retriever.explain(query, threshold=threshold, alpha=alpha, mode=mode,
                                      cands=self._candidates(query))

    def query_alpha(self, query: str, alpha: float | None = None) -> float:
        """The dense weight hybrid mode uses for ``query`` (``alpha`` adapted to the query)."""
        return self._candidates(query).query_alpha(alpha)

    def search(
        self, query: str, *, mode: str | None = None, threshold: float | None = None,
        k: int | None = None, alpha: float | None = None, reranker: str | None = None,
    ) -> list[Hit]:
        """What search returns with these settings (the Inspector's controls, its Rerank
        included), from the same cached candidates as ``explain`` (moving a control embeds
        nothing again)."""
        config = self.retriever.config(mode=mode, threshold=threshold, top_k=k, alpha=alpha,
                                       reranker=reranker)
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
            (d.chunk_target, d.chunk_overlap)
            != (target, effective_overlap(target, overlap))
            for d in docs
        )

    def _scratch_eval(
        self, set_name: str, cfg: ev.EvalConfig, *, progress=None, cancel=None
    ) -> tuple[ev.EvalResult, int, int]:
        qset = self.sets.get(set_name)
        with self._scratch(cfg, progress=progress, cancel=cancel) as (retriever, chunks,
                                                                       embedded):
            prepared = ev.prepare(retriever, qset, progress=progress, cancel=cancel)
            return ev.evaluate_prepared(retriever, prepared, cfg), chunks, embedded

    @contextmanager
    def _retriever_for(
        self, cfg: ev.EvalConfig, *, progress=None, cancel=None
    ) -> Iterator[Retriever]:
        """The library's retriever, or a scratch index's when ``cfg`` splits passages
        otherwise (removed on exit)."""
        if not self._needs_scratch(cfg):
            yield self.retriever
            return
        with self._scratch(cfg, progress=progress, cancel=cancel) as (retriever, _, _):
            yield retriever

    @contextmanager
    def _scratch(
        self, cfg: ev.EvalConfig, *, progress=None, cancel=None
    ) -> Iterator[tuple[Retriever, int, int]]:
        """A scratch index of the library split with ``cfg``'s passage size: (its retriever,
        passages, texts embedded now)."""
        s = self.ws.settings
        target, overlap = cfg.chunk_target, cfg.chunk_overlap
        folder = Path(tempfile.mkdtemp(prefix="marginalia-sweep-"))
        scratch = open_sqlite(folder / "scratch.db")
        try:
            chunks, embedded = self._build_scratch(
                scratch, target, overlap, progress=progress, cancel=cancel
            )
            yield Retriever(scratch, self.ws.embedder, s), chunks, embedded
        finally:
            scratch.close()
            shutil.rmtree(folder, ignore_errors=True)

    # -- answers ------------------------------------------------------------------------------

    def set_answers(self, set_name: str, answers: dict[str, str]) -> qs.QuestionSetSummary:
        """Type expected answers in the lab: question id -> answer ("" clears it)."""
        return self.sets.set_answers(set_name, answers)

    def evaluate_answers(
        self, set_name: str, config: ev.EvalConfig | None = None, *, progress=None,
        cancel: threading.Event | None = None,
    ) -> AnswerResult:
        """Answer every question of ``set_name`` with the configured answerer from the
        passages ``config`` returns (as Chat would, nothing saved), and measure the answers
        (``chat.answer_metrics``) beside the retrieval metrics of the same ranking."""
        cfg = config or self.default_config()
        qset = self.sets.get(set_name)
        answerer, embedder = self.ws.answerer, self.ws.embedder
        checks = []
        with self._retriever_for(cfg, progress=progress, cancel=cancel) as retriever:
            prepared = ev.prepare(retriever, qset, progress=progress, cancel=cancel)
            retrieval = ev.evaluate_prepared(retriever, prepared, cfg)
            total = len(qset.questions)
            for n, (q, cands) in enumerate(zip(qset.questions, prepared.candidates,
                                               strict=True), 1):
                if cancel is not None and cancel.is_set():
                    raise ev.Cancelled()
                hits = retriever.retrieve(cands, cfg, passages=prepared.chunks)
                sources = [dict(h.as_source(i)) for i, h in enumerate(hits, 1)]
                answer = am.answer_with(answerer, q.text, sources)
                checks.append(am.check_answer(q.id, q.text, q.answer, q.answerable, answer,
                                              sources, embedder=embedder))
                if progress:
                    progress({"type": "progress", "stage": "answer", "done": n,
                              "total": total})
        return AnswerResult(set_name, cfg, am.summarize(checks), checks, retrieval,
                            getattr(answerer, "model", "") or answerer.name)

    def _build_scratch(
        self, scratch: LibraryStore, target: int, overlap: int, *, progress=None, cancel=None
    ) -> tuple[int, int]:
        emb = self.ws.embedder
        planned = self._plan(target, overlap)
        texts = sorted({c.text for *_, cs in planned for c in cs})
        vectors = self._cached_vectors(texts, target, overlap, progress=progress, cancel=cancel)
        for d, text, starts, cs in planned:
            scratch.add_document(
                name=d.name, mime=d.mime, size=d.size, content_hash=d.content_hash,
                embed_model=emb.model, embed_dim=emb.dimension, chunks=cs,
                embeddings=np.array([vectors[c.text] for c in cs], dtype=np.float32).reshape(
                    len(cs), emb.dimension),
                page_count=d.page_count, chunk_target=target,
                chunk_overlap=effective_overlap(target, overlap), text=text, page_starts=starts,
                document_id=d.id,
            )
        return sum(len(cs) for *_, cs in planned), self._last_embedded

    def _plan(self, target: int, overlap: int) -> list[tuple[Document, str, list[int], list]]:
        """Every searchable document's stored text split at ``target`` / ``overlap``."""
        store, emb = self.ws.store, self.ws.embedder
        planned = []
        for d in store.list_documents():
            if (d.embed_model, d.embed_dim) != (emb.model, emb.dimension):
                continue
            text, starts = store.document_source(d.id)
            planned.append((d, text, starts,
                            chunk_text(text, target=target, overlap=overlap, page_starts=starts)))
        return planned

    def _uncached(self, texts: list[str]) -> list[str]:
        """Of ``texts``, those neither in the embedding cache nor among the library's own."""
        cached = EmbeddingCache(self.ws.store, self.ws.embedder.key).lookup(texts)
        missing = {t for t in texts if t not in cached}
        return sorted(missing)

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
