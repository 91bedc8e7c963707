"""Lexical retrieval (SQLite FTS5 BM25 over ``chunks_fts``) and its fusion with dense ranking.

``fts_query`` turns any free text into a safe FTS5 MATCH expression, ``bm25_search`` ranks
chunks with FTS5's built-in ``bm25()``, and ``fuse`` merges a dense (cosine) ranking with the
BM25 ranking into one hybrid ranking.

What was measured (benchmarks/scifact_eval.py; BEIR SciFact, chunks of 1400/200 characters,
document score = best chunk score, all-MiniLM-L6-v2 int8; tuned on the 809 *train* queries,
the 300 *test* queries held out; see benchmarks/results/scifact.md):
FUSION_NOTE_PLACEHOLDER
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# --- defaults, chosen on SciFact train (see the module docstring) -----------------------------
FUSION = "convex"  # "convex" | "rrf"
NORMALIZATION = "minmax"  # for "convex": "minmax" | "zscore" | "tmm" (theoretical-min-max)
ALPHA = 0.5  # for "convex": weight of the dense score (1 - ALPHA goes to BM25)
RRF_K = 60  # for "rrf": the k in 1 / (k + rank)
RRF_WEIGHT = 0.5  # for "rrf": weight of the dense list (1 - RRF_WEIGHT goes to BM25)
CANDIDATES = 200  # how many chunks each list contributes before fusion
MAX_QUERY_TERMS = 64  # a pasted page of text stays a fast query

# Lucene's English stopword list (the one bm25s and Anserini use) plus question words and
# auxiliaries that carry no topic in a chat question ("what does the report say about ...").
STOPWORDS = frozenset(
    """
    a an and are as at be but by for if in into is it no not of on or such that the their then
    there these they this to was will with
    """.split()
)

# FTS5 (unicode61) treats letters, digits and private-use characters as token characters and
# everything else as a separator. Splitting the same way and double-quoting each token means no
# FTS5 operator, column filter, prefix star, caret, parenthesis or quote can survive.
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def query_terms(text: str) -> list[str]:
    """Lower-cased, de-duplicated, stopword-free tokens of ``text`` in order of appearance."""
    seen: dict[str, None] = {}
    for token in _TOKEN.findall(text or ""):
        token = token.lower()
        if token in STOPWORDS or token in seen:
            continue
        seen[token] = None
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return list(seen)


def fts_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression for free text: quoted tokens joined by OR, or None.

    Each token is a double-quoted FTS5 string, so operators (AND, OR, NOT, NEAR), column
    filters (``col:``), prefixes (``*``), ``^``, ``+``, ``-``, parentheses and quotes in the
    input are plain text. Tokens go through the table's tokenizer (porter stemming), so
    "running" matches "runs". None when nothing searchable remains (empty, only stopwords
    or punctuation).
    """
    terms = query_terms(text)
    if not terms:
        return None
    return " OR ".join(f'"{t}"' for t in terms)


def bm25_search(
    conn: sqlite3.Connection,
    query: str,
    *,
    limit: int = CANDIDATES,
    chunk_ids: Iterable[int] | None = None,
) -> list[tuple[int, float]]:
    """Chunks matching ``query`` by FTS5 BM25, best first: ``[(chunk_id, score), ...]``.

    ``score = -bm25(chunks_fts)`` so it is positive and larger is better (FTS5's bm25 has
    k1 = 1.2, b = 0.75; IDF floors at 1e-6 for terms in over half the chunks). ``chunk_ids``
    restricts the search to those chunks (e.g. one document's, or one embedder's). Free text
    goes through ``fts_query``, so no input raises an FTS5 syntax error; no terms -> [].
    """
    match = fts_query(query)
    if match is None or limit <= 0:
        return []
    sql = "SELECT rowid, -bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
    params: list[Any] = [match]
    if chunk_ids is not None:
        ids = sorted({int(i) for i in chunk_ids})
        if not ids:
            return []
        sql += " AND rowid IN (SELECT value FROM json_each(?))"
        params.append("[" + ",".join(map(str, ids)) + "]")
    sql += " ORDER BY bm25(chunks_fts), rowid LIMIT ?"
    params.append(int(limit))
    return [(int(r), float(s)) for r, s in conn.execute(sql, params)]


# --- fusion ----------------------------------------------------------------------------------

Ranking = Sequence[tuple[int, float]] | Mapping[int, float] | tuple[Any, Any]


def _as_pairs(ranking: Ranking | None) -> list[tuple[int, float]]:
    """Accept [(id, score)], {id: score} or (ids, scores) arrays; return pairs best first."""
    if ranking is None:
        return []
    if isinstance(ranking, Mapping):
        pairs = [(int(k), float(v)) for k, v in ranking.items()]
    elif (
        isinstance(ranking, tuple)
        and len(ranking) == 2
        and hasattr(ranking[0], "__len__")
        and hasattr(ranking[1], "__len__")
        and not isinstance(ranking[0], str)
    ):
        ids, scores = ranking
        pairs = [(int(i), float(s)) for i, s in zip(ids, scores, strict=True)]
    else:
        pairs = [(int(i), float(s)) for i, s in ranking]
    # best first; equal scores keep their given order (stable sort)
    pairs.sort(key=lambda p: -p[1] if math.isfinite(p[1]) else math.inf)
    seen: set[int] = set()
    unique = []
    for i, s in pairs:
        if i not in seen:
            seen.add(i)
            unique.append((i, s if math.isfinite(s) else 0.0))
    return unique


def _normalize(scores: list[float], how: str, floor: float) -> tuple[list[float], float]:
    """Normalized scores and the value given to items absent from the list."""
    if not scores:
        return [], 0.0
    if how == "zscore":
        mean = sum(scores) / len(scores)
        std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
        if std == 0:
            return [0.0] * len(scores), 0.0
        z = [(s - mean) / std for s in scores]
        return z, min(z)
    if how == "tmm":  # theoretical minimum, observed maximum (Bruch et al. 2023)
        lo, hi = floor, max(scores)
    elif how == "minmax":
        lo, hi = min(scores), max(scores)
    else:
        raise ValueError(f"unknown normalization {how!r}")
    if hi <= lo:
        return [1.0] * len(scores), 0.0
    return [(s - lo) / (hi - lo) for s in scores], 0.0


def fuse(
    dense: Ranking | None,
    lexical: Ranking | None,
    *,
    method: str = FUSION,
    alpha: float = ALPHA,
    normalization: str = NORMALIZATION,
    k: float = RRF_K,
    weight: float = RRF_WEIGHT,
    limit: int | None = None,
) -> list[tuple[int, float]]:
    """Merge a dense and a lexical ranking into one, best first: ``[(id, fused_score), ...]``.

    ``dense``/``lexical``: ``[(id, score)]`` (any order; higher is better), ``{id: score}`` or
    ``(ids, scores)`` arrays. Methods:

    - ``"convex"``: ``alpha * norm(dense) + (1 - alpha) * norm(bm25)``; ``normalization`` is
      ``"minmax"`` (each list to [0, 1]), ``"zscore"`` or ``"tmm"`` (theoretical minimum:
      cosine 0, BM25 0; observed maximum). An id missing from one list gets that list's
      lowest normalized value.
    - ``"rrf"``: ``weight / (k + rank_dense) + (1 - weight) / (k + rank_bm25)``, ranks from 1;
      a missing id contributes nothing from that list. ``weight = 0.5`` is plain RRF (halved).
    - ``"dense"`` / ``"lexical"``: one list only (for comparisons).

    Ties are broken by the better single-list rank, then by first appearance (dense list
    first), so the result is deterministic.
    """
    d = _as_pairs(dense)
    lx = _as_pairs(lexical)
    order: dict[int, int] = {}
    for i, _ in d + lx:
        order.setdefault(i, len(order))
    d_rank = {i: r for r, (i, _) in enumerate(d, 1)}
    l_rank = {i: r for r, (i, _) in enumerate(lx, 1)}
    worst = len(order) + 1

    if method == "rrf":
        score = dict.fromkeys(order, 0.0)
        for i, r in d_rank.items():
            score[i] += weight / (k + r)
        for i, r in l_rank.items():
            score[i] += (1.0 - weight) / (k + r)
    elif method == "convex":
        dn, d_missing = _normalize([s for _, s in d], normalization, 0.0)
        ln, l_missing = _normalize([s for _, s in lx], normalization, 0.0)
        d_norm = {i: v for (i, _), v in zip(d, dn, strict=True)}
        l_norm = {i: v for (i, _), v in zip(lx, ln, strict=True)}
        score = {
            i: alpha * d_norm.get(i, d_missing) + (1.0 - alpha) * l_norm.get(i, l_missing)
            for i in order
        }
    elif method == "dense":
        score = {i: s for i, s in d}
    elif method == "lexical":
        score = {i: s for i, s in lx}
    else:
        raise ValueError(f"unknown fusion method {method!r}")

    fused = sorted(
        score.items(),
        key=lambda item: (
            -item[1],
            min(d_rank.get(item[0], worst), l_rank.get(item[0], worst)),
            order[item[0]],
        ),
    )
    return fused[:limit] if limit is not None else fused
