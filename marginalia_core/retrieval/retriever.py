"""Retrieval: question -> ranked passages, in dense, lexical (FTS5 BM25) or hybrid mode.

The score shown everywhere is the cosine similarity (0-1, "% relevance"); hybrid mode changes the
order and which passages make the top k, not the number displayed. The threshold applies to the
cosine in dense and hybrid modes (hybrid also keeps the best chunks that contain every query
term, see KEYWORD_RESCUE); lexical mode keeps every BM25 match.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from marginalia_core import events
from marginalia_core.config import Settings
from marginalia_core.errors import EmbedderMismatchError
from marginalia_core.providers.embeddings.base import Embedder
from marginalia_core.retrieval import lexical
from marginalia_core.retrieval.ranking import Scored, VectorIndex, top_k
from marginalia_core.store.sqlite import Store

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
        }


def make_excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > limit // 2 else limit].rstrip() + "…"


class Retriever:
    """Ranks the chunks indexed by one embedder; never mixes vectors of different embedders."""

    def __init__(self, store: Store, embedder: Embedder, settings: Settings):
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.index = VectorIndex(store, embedder.model, embedder.dimension)

    @property
    def threshold(self) -> float:
        t = self.settings.threshold
        return self.embedder.default_threshold if t is None else float(t)

    def other_embedders(self) -> dict[tuple[str, int], int]:
        """Documents indexed by an embedder other than the active one (not searchable now)."""
        return {
            key: n
            for key, n in self.store.embedder_counts().items()
            if key != (self.embedder.model, self.embedder.dimension)
        }

    def stale_documents(self) -> list[dict]:
        """Documents indexed by another embedder: the ones a re-index would bring back."""
        active = (self.embedder.model, self.embedder.dimension)
        return [
            d for d in self.store.list_documents() if (d["embed_model"], d["embed_dim"]) != active
        ]

    def mismatch(self) -> EmbedderMismatchError | None:
        others = self.other_embedders()
        if not others:
            return None
        count = sum(others.values())
        models = ", ".join(f"{m} ({d} d)" for m, d in others)
        return EmbedderMismatchError(
            f"{count} document(s) were indexed with {models}, not the active embedder "
            f"{self.embedder.model} ({self.embedder.dimension} d), so they are left out of "
            "search. Re-index them (Documents page, or `python -m marginalia_core reindex`)."
        )

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        threshold: float | None = None,
        mode: str | None = None,
    ) -> list[Hit]:
        k = self.settings.top_k if k is None else k
        threshold = self.threshold if threshold is None else threshold
        mode = mode or self.settings.retrieval_mode
        if mode == "lexical":
            scored = self.index.score_all(self.embedder.embed_query(query))
            lex = [
                (cid, cos, s)
                for (cid, s), cos in self._with_cosine(
                    scored, lexical.bm25_search(self.store.conn, query, limit=k)
                )
                if cos is not None  # another embedder's chunk: not searchable now
            ]
            return self._hits(lex)
        qvec = self.embedder.embed_query(query)
        scored = self.index.score_all(qvec)
        if mode == "dense":
            best = top_k(scored, k=k, threshold=threshold)
            return self._hits([(int(c), float(s), None) for c, s in zip(best.chunk_ids, best.scores)])
        return self._hybrid(query, scored, k=k, threshold=threshold)

    def _hybrid(self, query: str, scored: Scored, *, k: int, threshold: float) -> list[Hit]:
        if not len(scored.chunk_ids):
            return []
        top = top_k(scored, k=max(lexical.CANDIDATES, k))
        dense, lex = lexical.filled_lists(
            self.store.conn,
            query,
            list(zip(top.chunk_ids.tolist(), top.scores.tolist())),
            lambda ids: cosine_lookup(scored, ids),
        )
        cosine = dict(dense)
        lex_scores = dict(lex)
        rescued = {
            cid
            for cid, _ in lexical.bm25_search(
                self.store.conn, query, limit=KEYWORD_RESCUE, require_all=True
            )
        }
        out = []
        for cid, _ in lexical.fuse(dense, lex):
            if cosine[cid] < threshold and cid not in rescued:
                continue
            out.append((cid, cosine[cid], lex_scores.get(cid) or None))
            if len(out) == k:
                break
        return self._hits(out)

    @staticmethod
    def _with_cosine(scored: Scored, pairs: list[tuple[int, float]]):
        return zip(pairs, cosine_lookup(scored, [cid for cid, _ in pairs]))

    def _hits(self, ordered: list[tuple[int, float, float | None]]) -> list[Hit]:
        rows = self.store.chunks_by_ids([cid for cid, _, _ in ordered])
        hits = []
        for cid, score, lex in ordered:
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
                )
            )
        return hits

    def score_table(self, query: str, *, threshold: float | None = None) -> list[dict]:
        """Every chunk's cosine score (and BM25 where it matched), best first: the Inspector."""
        threshold = self.threshold if threshold is None else threshold
        scored = self.index.score_all(self.embedder.embed_query(query))
        if not len(scored.chunk_ids):
            return []
        order = np.lexsort((scored.chunk_ids, -scored.scores))
        ids = scored.chunk_ids[order].tolist()
        scores = scored.scores[order].tolist()
        lex = dict(lexical.bm25_search(self.store.conn, query, limit=len(ids)))
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
                    "page": _page_label(row["page_start"], row["page_end"]),
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


def cosine_lookup(scored: Scored, chunk_ids: list[int]) -> list[float | None]:
    """Cosine of each chunk id (None if not in the index); ids in ``scored`` are ascending."""
    if not chunk_ids:
        return []
    wanted = np.asarray(chunk_ids, dtype=np.int64)
    pos = np.searchsorted(scored.chunk_ids, wanted)
    pos = np.clip(pos, 0, len(scored.chunk_ids) - 1)
    found = scored.chunk_ids[pos] == wanted
    return [float(scored.scores[p]) if ok else None for p, ok in zip(pos, found)]


def _page_label(start: int, end: int) -> str:
    return str(start) if start == end else f"{start}–{end}"
