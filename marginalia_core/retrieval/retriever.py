"""Retrieval: question -> ranked passages, in dense, lexical (FTS5 BM25) or hybrid mode.

``Retriever.retrieve`` is the one path, for Chat, the Inspector and the metrics alike:
candidates -> fuse -> threshold -> rerank -> top-k -> text, under one ``RetrievalConfig``.

The score shown everywhere is the cosine similarity (0-1, "% relevance"); hybrid mode changes the
order and which passages make the top k, not the number displayed. The threshold applies to the
cosine in dense and hybrid modes (hybrid also keeps the best chunks that contain every query
term, see KEYWORD_RESCUE); lexical mode keeps every BM25 match.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marginalia_core import events
from marginalia_core.config import RetrievalConfig, Settings
from marginalia_core.errors import EmbedderMismatchError, MarginaliaError
from marginalia_core.providers.embeddings.base import Embedder
from marginalia_core.retrieval import lexical
from marginalia_core.retrieval.rerank import Reranker, get_reranker
from marginalia_core.retrieval.vector_index import (
    Scored,
    ServerIndex,
    VectorIndex,
    dense_index,
    top_k,
)
from marginalia_core.store.base import LibraryStore
from marginalia_core.store.records import Document

EXCERPT_CHARS = 280
# Hybrid mode keeps this many chunks that contain *every* query term even when their cosine is
# below the threshold: a rare word or an identifier ("drolleries", "ZX-4471") is the one case
# where the small embedder is blind and the keyword match is the better witness.
KEYWORD_RESCUE = 2


@dataclass(frozen=True)
class Hit:
    chunk_id: int
    document_id: str
    document_name: str
    idx: int
    page_start: int
    page_end: int
    score: float  # cosine similarity
    content: str
    rank: int
    lexical_score: float | None = None
    ocr: bool = False  # the passage's text was read from a scan by OCR
    mime: str = ""  # its document's
    location: str = ""  # what a citation calls its place: "p. 3", "slide 2", "" (a text file)
    start: int = 0  # character offsets in the document's text (span judgments)
    end: int = 0
    rescued: bool = False  # kept in hybrid mode below the threshold (every query term)

    @property
    def excerpt(self) -> str:
        return make_excerpt(self.content)

    def as_source(self, n: int) -> events.Source:
        """The source shape of the ``meta`` event."""
        return {
            "n": n,
            "chunk_id": self.chunk_id,
            "document_id": self.document_id,
            "document_name": self.document_name,
            "idx": self.idx,
            "page": self.page_start,
            "page_end": self.page_end,
            "score": round(float(self.score), 4),
            "excerpt": self.excerpt,
            "content": self.content,
            "ocr": self.ocr,
            "location": self.location,
        }


# Lexical mode's relevance floor: a BM25 match is kept only when the query terms it contains
# carry at least LEXICAL_FLOOR of the query's term weight (IDF; a word no passage contains
# counts fully) and its cosine is at least LEXICAL_COSINE_FLOOR, so one shared common word is not
# a match and a question the library cannot answer finds nothing. Chosen on the tuning splits
# (benchmarks/retrieval_lab.md): the BM25 order is unharmed (nDCG@10 SciFact train 0.702 ->
# 0.703, SQuAD 0.861 -> 0.862, PDF pages 0.952 -> 0.954) while 150 SQuAD questions asked of the
# PDF library get passages 17 % of the time instead of 83 %.
LEXICAL_FLOOR = 0.15
LEXICAL_COSINE_FLOOR = 0.15


@dataclass(frozen=True)
class RankedChunk:
    """One candidate's scores and ranks: the "why did this chunk rank" row."""

    chunk_id: int
    cosine: float
    bm25: float  # 0.0 when no query term occurs in the chunk
    coverage: float  # share of the query's term weight (IDF) the chunk contains, 0-1
    fused: float  # the hybrid score the fused order is sorted by
    dense_rank: int  # 1 = best cosine among the candidates
    lexical_rank: int | None  # 1 = best BM25; None when no term matched
    fused_rank: int
    rescued: bool  # contains every query term: kept in hybrid mode below the threshold
    phrase: float = 0.0  # share of the query's adjacent word pairs the chunk holds side by side


@dataclass(frozen=True)
class ExplainedChunk(RankedChunk):
    document_id: str = ""
    document_name: str = ""
    idx: int = 0
    page_start: int = 1
    page_end: int = 1
    content: str = ""
    passes: bool = False  # kept by the threshold step of the mode it was explained for
    mime: str = ""  # its document's
    location: str = ""  # "p. 3", "slide 2", "" (see Hit)

    @property
    def excerpt(self) -> str:
        return make_excerpt(self.content)


@dataclass(frozen=True)
class Candidates:
    """Every chunk either list proposed for one query, with both signals (see
    ``Retriever.candidates``); ``table`` re-ranks them for any fusion weight."""

    query: str
    chunk_ids: list[int]
    cosine: list[float]
    bm25: list[float]
    coverage: list[float]
    rescued: frozenset[int]
    signals: lexical.QuerySignals
    phrase: list[float] = field(default_factory=list)  # per chunk, ``lexical.phrase_share``

    @classmethod
    def empty(cls, query: str) -> Candidates:
        return cls(query, [], [], [], [], frozenset(), lexical.QuerySignals())

    def phrase_of(self) -> dict[int, float]:
        """{chunk id: phrase share} of the chunks holding any of the query's word pairs."""
        return {c: p for c, p in zip(self.chunk_ids, self.phrase, strict=False) if p > 0}

    @staticmethod
    def alpha_for(alpha: float | None) -> float:
        """The dense weight used: ``alpha`` if given, else ``lexical.ALPHA``."""
        return lexical.ALPHA if alpha is None else float(alpha)

    def query_alpha(self, alpha: float | None = None) -> float:
        """The dense weight hybrid fusion actually uses for this query: ``alpha`` (None:
        lexical.ALPHA) adapted to how peaked the two lists are (``lexical.query_alpha``)."""
        base = self.alpha_for(alpha)
        if not self.chunk_ids:
            return base
        lex = [b * c ** lexical.COVERAGE_POWER for b, c in zip(self.bm25, self.coverage)]
        return lexical.query_alpha(base, lexical.list_margin(self.cosine),
                                   lexical.list_margin(lex))

    def table(self, alpha: float | None = None) -> list[RankedChunk]:
        """Every candidate, best fused score first, with its rank in each list."""
        if not self.chunk_ids:
            return []
        dense = list(zip(self.chunk_ids, self.cosine))
        lex = list(zip(self.chunk_ids, self.bm25))
        phrase = self.phrase_of()
        fused = lexical.fuse(
            dense, lex, alpha=self.alpha_for(alpha),
            coverage=dict(zip(self.chunk_ids, self.coverage)), phrase=phrase,
        )
        d_rank = {c: r for r, (c, _) in enumerate(lexical.fuse(dense, None, method="dense"), 1)}
        matched = [(c, s) for c, s in lex if s > 0]
        l_rank = {c: r for r, (c, _) in enumerate(lexical.fuse(None, matched, method="lexical"), 1)}
        pos = {c: i for i, c in enumerate(self.chunk_ids)}
        return [
            RankedChunk(
                chunk_id=c,
                cosine=self.cosine[pos[c]],
                bm25=self.bm25[pos[c]],
                coverage=self.coverage[pos[c]],
                fused=float(score),
                dense_rank=d_rank[c],
                lexical_rank=l_rank.get(c),
                fused_rank=n,
                rescued=c in self.rescued,
                phrase=phrase.get(c, 0.0),
            )
            for n, (c, score) in enumerate(fused, 1)
        ]


def make_excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > limit // 2 else limit].rstrip() + "…"


class Retriever:
    """Ranks the chunks indexed by one embedder; never mixes vectors of different embedders."""

    def __init__(self, store: LibraryStore, embedder: Embedder, settings: Settings):
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self._index: VectorIndex | ServerIndex | None = None
        self._index_lock = threading.Lock()
        self._seeded = False
        self._rerankers: dict[str, Reranker] = {}

    @property
    def index(self) -> VectorIndex | ServerIndex:
        """Built on first use: a remote embedder may only learn its dimension from the server,
        and a failure there belongs to the search (an error event), not to start-up. On
        PostgreSQL the database ranks (HNSW); on SQLite the vectors are ranked in process."""
        if self._index is None:
            with self._index_lock:
                if self._index is None:
                    self._index = dense_index(self.store, self.embedder.model, self._dimension())
        return self._index

    def _dimension(self) -> int:
        """The active embedder's dimension. A remote one that has not embedded anything yet is
        first told the size its documents recorded, so listing the library or opening the
        index needs no request to the server (pages render while it is down)."""
        if not self._seeded:
            remember = getattr(self.embedder, "remember_dimension", None)
            if remember is not None:
                dims = {d for m, d in self.store.embedder_counts() if m == self.embedder.model}
                if len(dims) == 1:
                    remember(dims.pop())
            self._seeded = True
        return self.embedder.dimension

    def _is_active(self, model: str, dimension: int) -> bool:
        return model == self.embedder.model and dimension == self._dimension()

    @property
    def threshold(self) -> float:
        """The cosine floor the settings apply (None there: the embedder's own default)."""
        t = self.settings.retrieval.threshold
        return self.embedder.default_threshold if t is None else float(t)

    def threshold_of(self, config: RetrievalConfig) -> float:
        """``config``'s threshold; None: the settings' (then the embedder's default)."""
        return self.threshold if config.threshold is None else float(config.threshold)

    def alpha_of(self, config: RetrievalConfig) -> float:
        """``config``'s fusion weight; None: the settings' (then ``lexical.ALPHA``)."""
        alpha = self.settings.retrieval.alpha if config.alpha is None else config.alpha
        return Candidates.alpha_for(alpha)

    def config(self, **overrides: Any) -> RetrievalConfig:
        """The settings' retrieval configuration with the non-None ``overrides``."""
        return self.settings.retrieval.with_overrides(**overrides)

    def other_embedders(self) -> dict[tuple[str, int], int]:
        """Documents indexed by an embedder other than the active one (not searchable now)."""
        return {
            key: n
            for key, n in self.store.embedder_counts().items()
            if not self._is_active(*key)
        }

    def is_searchable(self, document: Document) -> bool:
        """Indexed by the active embedder, so it takes part in search."""
        return self._is_active(document.embed_model, document.embed_dim)

    def stale_documents(self) -> list[Document]:
        """Documents indexed by another embedder: the ones a re-index would bring back."""
        return [d for d in self.store.list_documents() if not self.is_searchable(d)]

    def mismatch(self) -> EmbedderMismatchError | None:
        others = self.other_embedders()
        if not others:
            return None
        count = sum(others.values())
        models = ", ".join(f"{m} ({d} d)" for m, d in others)
        try:
            active = f"{self.embedder.model} ({self._dimension()} d)"
        except MarginaliaError:  # a model server that is down: its size is unknown yet
            active = self.embedder.model
        return EmbedderMismatchError(
            f"{count} document(s) were indexed with {models}, not the active embedder "
            f"{active}, so they are left out of "
            "search. Re-index them (Documents page, or `python -m marginalia_core reindex`)."
        )

    def candidates(
        self,
        query: str,
        *,
        limit: int | None = None,
        documents: Collection[str] | None = None,
    ) -> Candidates:
        """Both candidate lists for ``query`` (dense top ``limit`` and BM25 top ``limit``), each
        candidate with its exact cosine and BM25: everything any mode, weight or threshold
        needs, so re-ranking (the Inspector's keyword weight, sweeps) embeds nothing again.
        ``documents`` limits both lists to those documents' chunks (None: every document)."""
        limit = max(lexical.CANDIDATES, int(limit or 0))
        query = events.well_formed(query)
        vector = self.embedder.embed_query(query)
        allowed: list[int] | None = None
        index = self.index
        if documents is None:
            top = index.search(vector, k=limit)
        elif isinstance(index, ServerIndex):  # the scope goes into the database's query
            allowed = self.store.chunk_ids_of_documents(list(documents))
            top = index.search(vector, k=limit, documents=list(documents))
        else:  # a conversation's documents: exact cosines of just their chunks
            allowed = self.store.chunk_ids_of_documents(list(documents))
            pairs = [(c, v) for c, v in zip(allowed, self.index.cosine(vector, allowed))
                     if v is not None]
            top = top_k(
                Scored(np.asarray([c for c, _ in pairs], dtype=np.int64),
                       np.asarray([v for _, v in pairs], dtype=np.float32)),
                k=limit,
            )
        if not len(top.chunk_ids):
            return Candidates.empty(query)
        dense, lex = lexical.filled_lists(
            self.store,
            query,
            list(zip(top.chunk_ids.tolist(), top.scores.tolist())),
            lambda ids: self.index.cosine(vector, list(ids)),
            limit=limit,
            chunk_ids=allowed,
        )
        bm25 = dict(lex)
        ids = [c for c, _ in dense]
        rescued = frozenset(
            cid
            for cid, _ in lexical.bm25_search(
                self.store, query, limit=KEYWORD_RESCUE, require_all=True, chunk_ids=allowed
            )
        )
        weights = lexical.term_weights(self.store, query)
        contained = lexical.terms_in_chunks(self.store, [t for t, w in weights.items() if w > 0], ids)
        coverage = lexical.coverage_of(contained, weights)
        # only a chunk holding two of the query's words can hold a pair of them side by side
        paired = [c for c, terms in contained.items() if len(terms) >= 2]
        texts = (
            {c: m["content"] for c, m in self.store.chunks_by_ids(paired).items()} if paired else {}
        )
        phrase = lexical.phrase_share(query, texts)
        return Candidates(
            query=query,
            chunk_ids=ids,
            cosine=[float(s) for _, s in dense],
            bm25=[float(bm25.get(c, 0.0)) for c in ids],
            coverage=[coverage.get(c, 0.0) for c in ids],
            rescued=rescued,
            signals=lexical.query_signals(query, weights),
            phrase=[phrase.get(c, 0.0) for c in ids],
        )

    def retrieve(
        self,
        query: str | Candidates,
        config: RetrievalConfig | None = None,
        *,
        documents: Collection[str] | None = None,
        top_k: bool = True,
        passages: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> list[Hit]:
        """The one retrieval path (Chat through ``search``, the Inspector through
        ``RetrievalLab.search``, the metrics through ``evaluation``): candidates -> fuse ->
        threshold -> rerank -> top-k -> text, under ``config`` (None: the settings').

        ``query`` may be candidates already gathered (the Inspector's cache, an evaluation's
        prepared questions); ``documents`` limits the search to those documents (None: all);
        ``top_k=False`` keeps every passage that passes (the metrics rank past k);
        ``passages`` are chunk rows already read (no query for the text)."""
        config = self.settings.retrieval if config is None else config
        cands = (query if isinstance(query, Candidates)
                 else self.candidates(query, limit=config.top_k, documents=documents))
        ranked = self.fuse(cands, config)
        ranked = self.passing(ranked, config)
        ranked = self.reranker(config.reranker).rerank(
            cands.query, ranked, self._passage_source(passages), alpha=self.alpha_of(config))
        if top_k:
            ranked = ranked[: config.top_k]
        return self.with_text(ranked, passages)

    def fuse(self, cands: Candidates, config: RetrievalConfig) -> list[RankedChunk]:
        """Every candidate in ``config.mode``'s order: dense by cosine, lexical by BM25 (only
        the chunks a query term matched), hybrid by the fused score (``alpha_of(config)``)."""
        rows = cands.table(self.alpha_of(config))
        if config.mode == "dense":
            rows.sort(key=lambda r: r.dense_rank)
        elif config.mode == "lexical":
            rows = [r for r in rows if r.lexical_rank is not None]
            rows.sort(key=lambda r: r.lexical_rank or 0)
        elif config.mode != "hybrid":
            raise ValueError(f"unknown retrieval mode {config.mode!r}")
        return rows

    def passing(self, ranked: Sequence[RankedChunk], config: RetrievalConfig) -> list[RankedChunk]:
        """The threshold step. dense: cosine >= threshold. lexical: above the lexical floor
        (LEXICAL_FLOOR, LEXICAL_COSINE_FLOOR). hybrid: cosine >= threshold or a keyword rescue."""
        threshold = self.threshold_of(config)
        if config.mode == "lexical":
            return [r for r in ranked
                    if r.coverage >= LEXICAL_FLOOR and r.cosine >= LEXICAL_COSINE_FLOOR]
        if config.mode == "dense":
            return [r for r in ranked if r.cosine >= threshold]
        return [r for r in ranked if r.cosine >= threshold or r.rescued]

    def reranker(self, name: str) -> Reranker:
        """The rerank step's provider (``RetrievalConfig.reranker``), built once by name."""
        found = self._rerankers.get(name)
        if found is None:
            found = self._rerankers[name] = get_reranker(name, self.embedder)
        return found

    def _passage_source(self, passages: Mapping[int, Mapping[str, Any]] | None):
        if passages is None:
            return lambda ids: self.store.chunks_by_ids(list(ids))
        return lambda ids: {c: passages[c] for c in ids if c in passages}

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        threshold: float | None = None,
        mode: str | None = None,
        alpha: float | None = None,
        documents: Collection[str] | None = None,
    ) -> list[Hit]:
        """Chat's search: ``retrieve`` with the settings' configuration and these overrides;
        ``documents`` limits the search to those documents (None: all), in every mode."""
        config = self.config(top_k=k, threshold=threshold, mode=mode, alpha=alpha)
        return self.retrieve(query, config, documents=documents)

    def explain(
        self,
        query: str,
        *,
        threshold: float | None = None,
        alpha: float | None = None,
        mode: str | None = None,
        cands: Candidates | None = None,
    ) -> list[ExplainedChunk]:
        """Why each candidate ranked where it did: cosine, BM25, fused score and its rank in
        each list, with the chunk's text, and whether it passes ``mode``'s threshold step
        (``passing``, the very rule ``retrieve`` applies). Pass ``cands`` (from ``candidates``)
        and a new ``alpha`` to re-rank with another keyword weight without embedding again."""
        config = self.config(threshold=threshold, alpha=alpha, mode=mode)
        cands = cands or self.candidates(query)
        rows = cands.table(self.alpha_of(config))
        passed = {r.chunk_id for r in self.passing(rows, config)}
        meta = self.store.chunks_by_ids([r.chunk_id for r in rows])
        out = []
        for r in rows:
            m = meta.get(r.chunk_id)
            if m is None:
                continue
            out.append(
                ExplainedChunk(
                    **{f: getattr(r, f) for f in RankedChunk.__dataclass_fields__},
                    document_id=m["document_id"],
                    document_name=m["document_name"],
                    idx=m["idx"],
                    page_start=m["page_start"],
                    page_end=m["page_end"],
                    content=m["content"],
                    passes=r.chunk_id in passed,
                    mime=str(m.get("mime") or ""),
                    location=str(m.get("location") or ""),
                )
            )
        return out

    def with_text(
        self, ranked: Sequence[RankedChunk],
        passages: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> list[Hit]:
        """The text step: ranked chunks as numbered hits with their passage (read from the
        store unless ``passages`` holds them); a chunk deleted meanwhile is left out."""
        rows = (self.store.chunks_by_ids([r.chunk_id for r in ranked]) if passages is None
                else passages)
        return hits_from(ranked, rows)

    def score_table(self, query: str, *, threshold: float | None = None) -> list[dict]:
        """Every chunk's cosine score (and BM25 where it matched), best first: the Inspector."""
        threshold = self.threshold if threshold is None else threshold
        scored = self.index.score_all(self.embedder.embed_query(query))
        if not len(scored.chunk_ids):
            return []
        order = np.lexsort((scored.chunk_ids, -scored.scores))
        ids = scored.chunk_ids[order].tolist()
        scores = scored.scores[order].tolist()
        lex = dict(lexical.bm25_search(self.store, query, limit=len(ids)))
        rows = self.store.chunks_by_ids(ids)
        table = []
        for rank, (cid, score) in enumerate(zip(ids, scores), start=1):
            row = rows.get(cid)
            if row is None:
                continue
            table.append(
                {
                    "document": row["document_name"],
                    "chunk": row["idx"],
                    "page": _short_location(str(row.get("location") or "")),
                    "score": round(score, 4),
                    "rank": rank,
                    "passes": score >= threshold,
                    "bm25": round(lex[cid], 3) if cid in lex else None,
                    "excerpt": make_excerpt(row["content"], 160),
                    "chunk_id": cid,
                    "document_id": row["document_id"],
                }
            )
        return table


def hits_from(
    ranked: Sequence[RankedChunk], rows: Mapping[int, Mapping[str, Any]]
) -> list[Hit]:
    """Ranked chunks as numbered hits, their text from ``rows`` (chunk id -> stored row)."""
    hits: list[Hit] = []
    for r in ranked:
        cid, score, lex = r.chunk_id, r.cosine, r.bm25 or None
        row = rows.get(cid)
        if row is None:  # deleted since the matrix was loaded
            continue
        hits.append(
            Hit(
                chunk_id=cid,
                document_id=row["document_id"],
                document_name=row["document_name"],
                idx=row["idx"],
                page_start=row["page_start"],
                page_end=row["page_end"],
                score=float(score),
                content=row["content"],
                rank=len(hits) + 1,
                lexical_score=None if lex is None else float(lex),
                ocr=bool(row.get("ocr")),
                mime=str(row.get("mime") or ""),
                location=str(row.get("location") or ""),
                start=int(row.get("start") or 0),
                end=int(row.get("end") or 0),
                rescued=r.rescued,
            )
        )
    return hits


def _short_location(location: str) -> str:
    """"3" or "3–5" for a PDF's passage ("p. 3"), the label itself for other locations ("slide
    2"), "" for a text or Markdown file (no locations)."""
    for prefix in ("pp. ", "p. "):
        if location.startswith(prefix):
            return location[len(prefix):]
    return location
