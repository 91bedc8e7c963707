"""The rerank step of retrieval (candidates -> fuse -> threshold -> **rerank** -> top-k ->
text): a small interface, chosen by ``RetrievalConfig.reranker`` and registered by name like the
embedders and answerers, so a reranker reaches Chat, the Inspector and the metrics at once.

A reranker reorders (or drops) the passages that passed the threshold, before the top k is
taken; it must not depend on k (the metrics rank past it). ``passages(ids)`` gives their stored
rows (``content``, ``document_name``, pages, offsets) without another query when the caller
already holds them (an evaluation).

``sentences`` (issue 23): a passage is embedded once, as a whole, and the small local embedder
reads only its first 256 tokens (about 1,000 of a passage's 1,400 characters); one vector for
ten sentences also blurs the one sentence a question asks about. ``SentenceWindows`` splits each
of the top ``DEPTH`` passages into short windows of consecutive sentences, embeds them, and
takes the question's best cosine against them ("max-sim"); the passage's dense score becomes
``(1 - WEIGHT) * cosine + WEIGHT * best window`` and the top passages are fused again (so the
per-query dense weight sees how peaked the window scores are). Window vectors are memoised by
text (``WindowCache``), so a passage asked about again costs nothing. Chosen on the tune splits
(benchmarks/rerank_lab.py); what it gains held out and what it costs per question:
benchmarks/README.md.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from marginalia_core.config import NO_RERANKER
from marginalia_core.registry import resolve
from marginalia_core.retrieval import lexical

if TYPE_CHECKING:
    from marginalia_core.providers.embeddings.base import Embedder
    from marginalia_core.retrieval.retriever import RankedChunk

Passages = Callable[[Sequence[int]], Mapping[int, Mapping[str, Any]]]

SENTENCE_RERANKER = "sentences"

DEPTH = 10  # fused passages reranked (tune splits: 6-20 within 0.01 of each other)
WEIGHT = 0.5  # share of the best window's cosine in a reranked passage's dense score
WINDOW_CHARS = 320  # a window packs consecutive sentences up to this length (one at least)
MIN_WINDOW_CHARS = 25  # shorter pieces join their neighbour
CACHE_WINDOWS = 20_000  # window vectors memoised (384 floats each: ~30 MB)

STEM = 6  # words compare by their first 6 letters, as the phrase bonus does (any language)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?;])[\"'”’)\]]*\s+|\n\s*\n")


class Reranker(Protocol):
    """Built once per retriever with its embedder: ``cls(embedder)``. ``alpha``: the hybrid
    fusion's base dense weight under the configuration in force (a reranker that fuses again
    uses it, so the Inspector's keyword-weight slider and the saved configuration reach it)."""

    def rerank(
        self, query: str, ranked: Sequence[RankedChunk], passages: Passages, *,
        alpha: float = lexical.ALPHA,
    ) -> list[RankedChunk]: ...


class KeepOrder:
    """No reranking: the fused (or single-list) order stands. The default."""

    def __init__(self, embedder: Embedder | None = None):
        self.embedder = embedder

    def rerank(
        self, query: str, ranked: Sequence[RankedChunk], passages: Passages, *,
        alpha: float = lexical.ALPHA,
    ) -> list[RankedChunk]:
        return list(ranked)


# name -> class or "module:Class" (imported on first use)
RERANKERS: dict[str, type | str] = {
    NO_RERANKER: KeepOrder,
    SENTENCE_RERANKER: "marginalia_core.retrieval.rerank:SentenceWindows",
}


def reranker_class(name: str) -> type:
    return resolve(RERANKERS, name or NO_RERANKER, "reranker")


def get_reranker(name: str, embedder: Embedder) -> Reranker:
    return reranker_class(name)(embedder)


def sentences(text: str) -> list[str]:
    """The passage's sentences (and blank-line separated pieces), whitespace collapsed; a piece
    shorter than MIN_WINDOW_CHARS joins its neighbour."""
    out: list[str] = []
    for piece in _SENTENCE_END.split(text):
        piece = " ".join(piece.split())
        if not piece:
            continue
        if out and (len(piece) < MIN_WINDOW_CHARS or len(out[-1]) < MIN_WINDOW_CHARS):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def _cut(sentence: str, limit: int) -> list[str]:
    """A sentence longer than 1.5 x ``limit`` (a run of text with no full stop, common in PDFs)
    in word-aligned pieces of about ``limit`` characters."""
    if len(sentence) <= limit * 3 // 2:
        return [sentence]
    words, pieces, cur = sentence.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > limit:
            pieces.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        pieces.append(cur)
    return pieces


def sentence_windows(text: str, limit: int = WINDOW_CHARS) -> list[str]:
    """Windows of consecutive sentences, each up to ``limit`` characters; a window starts at the
    previous one's last sentence when those two sentences fit in one window (so a fact split
    over two sentences is seen whole)."""
    sents = [p for s in sentences(text) for p in _cut(s, limit)]
    windows: list[str] = []
    i = 0
    while i < len(sents):
        j, size = i + 1, len(sents[i])
        while j < len(sents) and size + 1 + len(sents[j]) <= limit:
            size += 1 + len(sents[j])
            j += 1
        windows.append(" ".join(sents[i:j]))
        if j >= len(sents):
            break
        overlap = j - 1 > i and len(sents[j - 1]) + 1 + len(sents[j]) <= limit
        i = j - 1 if overlap else j
    return windows


class WindowCache:
    """Window vectors by text, least recently used dropped past ``size``; thread-safe (Chat and
    the Inspector share one retriever)."""

    def __init__(self, size: int = CACHE_WINDOWS):
        self.size = size
        self._vecs: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def vectors(self, texts: Sequence[str],
                embed: Callable[[list[str]], np.ndarray]) -> list[np.ndarray]:
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._vecs))
        if missing:
            fresh = np.asarray(embed(missing), dtype=np.float32)
            with self._lock:
                for t, v in zip(missing, fresh, strict=True):
                    self._vecs[t] = v
                while len(self._vecs) > self.size:
                    self._vecs.popitem(last=False)
        with self._lock:
            out = []
            for t in texts:
                v = self._vecs.get(t)
                if v is None:  # dropped by a concurrent caller: embed it again
                    v = np.asarray(embed([t]), dtype=np.float32)[0]
                self._vecs[t] = v
                self._vecs.move_to_end(t)
                out.append(v)
            return out


def maxsim(query_vector: np.ndarray, texts: Sequence[str],
           embed: Callable[[list[str]], np.ndarray], cache: WindowCache | None = None,
           limit: int = WINDOW_CHARS) -> list[float]:
    """Per passage text, the best cosine of the (unit) query vector against its windows."""
    windows = [sentence_windows(t, limit) or [t[:limit]] for t in texts]
    flat = [w for ws in windows for w in ws]
    if not flat:
        return [0.0 for _ in texts]
    vecs = cache.vectors(flat, embed) if cache is not None else list(
        np.asarray(embed(flat), dtype=np.float32))
    q = np.asarray(query_vector, dtype=np.float32)
    out, pos = [], 0
    for ws in windows:
        block = np.stack(vecs[pos : pos + len(ws)])
        pos += len(ws)
        out.append(float((block @ q).max()))
    return out


def _stems(text: str) -> set[str]:
    return {t[:STEM] for t in _WORD.findall((text or "").lower())}


def title_share(weights: Mapping[str, float], title: str) -> float:
    """The share of the query's term weight (IDF, ``lexical.term_weights``) that the document's
    title holds: BM25's title field, scored apart from the body so a passage of the document a
    question names ("the Fresno article", "GPL version 3") is preferred."""
    total = sum(weights.values())
    if total <= 0 or not title:
        return 0.0
    stems = _stems(title)
    return sum(w for t, w in weights.items() if t[:STEM] in stems) / total


def document_title(name: str) -> str:
    """A file name as title words: extension dropped, separators as spaces."""
    stem = name.rsplit(".", 1)[0] if "." in name[-6:] else name
    return " ".join(_WORD.findall(stem))


def best_windows(windows: Sequence[str], weights: Mapping[str, float], keep: int) -> list[str]:
    """The ``keep`` windows holding the most query term weight (ties: the earlier), in passage
    order: the embedder reads only those, which bounds the rerank's cost per passage."""
    if keep <= 0 or len(windows) <= keep:
        return list(windows)
    stems = {t[:STEM]: w for t, w in weights.items()}
    scored = [(sum(w for s, w in stems.items() if s in _stems(win)), -i)
              for i, win in enumerate(windows)]
    chosen = sorted(range(len(windows)), key=lambda i: scored[i], reverse=True)[:keep]
    return [windows[i] for i in sorted(chosen)]


class SentenceWindows:
    """Rerank by sentence windows (module docstring). Hybrid order: the top DEPTH passages are
    fused again with each one's dense score replaced by ``(1 - WEIGHT) * cosine + WEIGHT *
    best window cosine``, so the per-query dense weight (``lexical.query_alpha``) sees how
    peaked the window scores are. Dense order: the top DEPTH by that mixed cosine. Lexical
    order (keywords only, by choice) is kept."""

    def __init__(self, embedder: Embedder, *, depth: int = DEPTH, weight: float = WEIGHT,
                 cache: WindowCache | None = None):
        self.embedder = embedder
        self.depth = depth
        self.weight = weight
        self.cache = cache or WindowCache()

    def rerank(self, query: str, ranked: Sequence[RankedChunk],
               passages: Passages, *, alpha: float = lexical.ALPHA) -> list[RankedChunk]:
        ranked = list(ranked)
        order = _order_of(ranked)
        top, rest = ranked[: self.depth], ranked[self.depth :]
        if order == "lexical" or len(top) < 2:
            return ranked
        rows = passages([r.chunk_id for r in top])
        texts = [str(rows.get(r.chunk_id, {}).get("content", "")) for r in top]
        sims = maxsim(self.embedder.embed_query(query), texts, self.embedder.embed_documents,
                      self.cache)
        mixed = {r.chunk_id: (1 - self.weight) * r.cosine + self.weight * s
                 for r, s in zip(top, sims, strict=True)}
        if order == "dense":
            return sorted(top, key=lambda r: -mixed[r.chunk_id]) + rest
        fused = lexical.fuse(
            [(r.chunk_id, mixed.get(r.chunk_id, r.cosine)) for r in ranked],
            [(r.chunk_id, r.bm25) for r in ranked],
            alpha=alpha,
            coverage={r.chunk_id: r.coverage for r in ranked},
            phrase={r.chunk_id: r.phrase for r in ranked if r.phrase > 0},
        )
        rank = {cid: n for n, (cid, _) in enumerate(fused)}
        return sorted(top, key=lambda r: rank[r.chunk_id]) + rest


def _order_of(ranked: Sequence[RankedChunk]) -> str:
    """Which mode's order the rows are in: "hybrid" (fused ranks ascending), "dense" (dense
    ranks ascending) or "lexical"."""
    if all(a.fused_rank < b.fused_rank for a, b in zip(ranked, ranked[1:], strict=False)):
        return "hybrid"
    if all(a.dense_rank < b.dense_rank for a, b in zip(ranked, ranked[1:], strict=False)):
        return "dense"
    return "lexical"
