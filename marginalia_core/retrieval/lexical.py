"""Lexical retrieval (SQLite FTS5 BM25 over ``chunks_fts``) and its fusion with dense ranking.

``fts_query`` turns any free text into a safe FTS5 MATCH expression, ``bm25_search`` ranks
chunks with FTS5's built-in ``bm25()``, and ``fuse`` merges a dense (cosine) ranking with the
BM25 ranking into one hybrid ranking.

Why the fusion is this one (filled lists, tmm normalisation, a per-query weight, the phrase
share, ALPHA, PHRASE_WEIGHT) and what was measured and not adopted: benchmarks/README.md,
"Fusion: what was measured".
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marginalia_core.store import sqlite_lexical
from marginalia_core.store.base import LexicalSource
from marginalia_core.store.fts import fts_match

# --- defaults, chosen on SciFact train (benchmarks/README.md, "Fusion: what was measured") ---
FUSION = "convex"  # "convex" | "rrf"
NORMALIZATION = "tmm"  # for "convex": "minmax" | "zscore" | "tmm" (theoretical-min-max)
ALPHA = 0.6  # for "convex": base weight of the dense score (1 - ALPHA goes to BM25)
# for "convex": the weight adapts per query to how peaked each list is (``query_alpha``): each
# list's base weight is multiplied by its margin ** ADAPTIVE_POWER, the margin being
# (best - ADAPTIVE_DEPTH-th best) / best. 0 = a fixed weight.
ADAPTIVE_POWER = 0.5
ADAPTIVE_DEPTH = 20
# for "convex" with ``coverage``: the BM25 part is multiplied by coverage ** COVERAGE_POWER
COVERAGE_POWER = 1.0
# for "convex" with ``phrase``: added to the fused score of a chunk holding every adjacent pair of
# the query's words in the same order (stopwords skipped), in proportion to the pairs it holds
PHRASE_WEIGHT = 0.4
PHRASE_PREFIX = 6  # a word pair compares the words' first 6 letters: a stem that needs no language
RRF_MIX = 0.0  # for "convex": weight of an added rank (RRF) term, 1.0 = first in both lists
RRF_MIX_K = 5
RRF_K = 1  # for "rrf": the k in 1 / (k + rank); k = 1 was best on train (0.727; k = 10: 0.721)
RRF_WEIGHT = 0.5  # for "rrf": weight of the dense list (1 - RRF_WEIGHT goes to BM25)
CANDIDATES = 200  # how many chunks each list contributes before fusion
MAX_QUERY_TERMS = 64  # a pasted page of text stays a fast query

# Lucene's English stopword list (the one bm25s and Anserini use) plus question words and
# auxiliaries that carry no topic in a chat question ("what does the report say about ...").
_QUERY_STOPWORD_TEXT = """
    a an and are as at be but by for if in into is it no not of on or such that the their then
    there these they this to was will with
    what which who whom whose when where why how do does did can could should would may might
    i me my we our you your he she him her his its them us am been being were has have had
    from about than so also any all some each other only very just
"""
QUERY_STOPWORDS = frozenset(_QUERY_STOPWORD_TEXT.split())

# FTS5 (unicode61) treats letters, digits and private-use characters as token characters and
# everything else as a separator. Splitting the same way and double-quoting each token means no
# FTS5 operator, column filter, prefix star, caret, parenthesis or quote can survive.
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def query_terms(text: str) -> list[str]:
    """Lower-cased, de-duplicated, stopword-free tokens of ``text`` in order of appearance."""
    seen: dict[str, None] = {}
    for token in _TOKEN.findall(text or ""):
        token = token.lower()
        if token in QUERY_STOPWORDS or token in seen:
            continue
        seen[token] = None
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return list(seen)


def fts_query(text: str, *, require_all: bool = False) -> str | None:
    """A safe FTS5 MATCH expression for free text: quoted tokens joined by OR (AND with
    ``require_all``), or None.

    Each token is a double-quoted FTS5 string, so operators (AND, OR, NOT, NEAR), column
    filters (``col:``), prefixes (``*``), ``^``, ``+``, ``-``, parentheses and quotes in the
    input are plain text. Tokens go through the table's tokenizer (porter stemming), so
    "running" matches "runs". None when nothing searchable remains (empty, only stopwords
    or punctuation).
    """
    terms = query_terms(text)
    return fts_match(terms, require_all=require_all) if terms else None


def filled_lists(
    conn: LexicalSource | sqlite3.Connection,
    query: str,
    dense: Sequence[tuple[int, float]],
    cosine_of: Callable[[Sequence[int]], Sequence[float | None]],
    *,
    limit: int = CANDIDATES,
    chunk_ids: Sequence[int] | None = None,
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """The two candidate lists for fusion, each completed with the other signal's exact score.

    ``dense`` is the dense top ``limit`` as (chunk id, cosine); ``cosine_of(ids)`` gives the
    cosine of any chunk (None for one the dense index doesn't hold, e.g. another embedder's).
    BM25 hits outside the dense list get their cosine, dense hits outside the BM25 list their
    BM25 (0 when no query term occurs in them), so fusion compares like with like.
    ``chunk_ids`` limits the BM25 list to those chunks (a conversation's documents).
    """
    lex = bm25_search(conn, query, limit=limit, chunk_ids=chunk_ids)
    dense_ids = {c for c, _ in dense}
    lex_ids = {c for c, _ in lex}
    extra = [c for c, _ in lex if c not in dense_ids]
    extra_cos = dict(zip(extra, cosine_of(extra)))
    lex = [(c, s) for c, s in lex if c in dense_ids or extra_cos.get(c) is not None]
    dense_full = list(dense) + [(c, float(cos)) for c, _ in lex
                                 if c not in dense_ids and (cos := extra_cos.get(c)) is not None]
    missing = [c for c, _ in dense if c not in lex_ids]
    found = dict(bm25_search(conn, query, limit=len(missing), chunk_ids=missing)) if missing else {}
    return dense_full, lex + [(c, found.get(c, 0.0)) for c in missing]


def lexical_source(source: LexicalSource | sqlite3.Connection) -> LexicalSource:
    """The store's lexical side; a bare SQLite connection (benchmarks, scratch files) is wrapped
    in FTS5's, so every function here works on any store."""
    return sqlite_lexical(source) if isinstance(source, sqlite3.Connection) else source


def bm25_search(
    source: LexicalSource | sqlite3.Connection,
    query: str,
    *,
    limit: int = CANDIDATES,
    chunk_ids: Iterable[int] | None = None,
    require_all: bool = False,
) -> list[tuple[int, float]]:
    """Chunks matching ``query`` by the store's lexical ranking, best first:
    ``[(chunk_id, score)]``, larger is better.

    SQLite: FTS5 ``-bm25(chunks_fts)`` (k1 = 1.2, b = 0.75; IDF floors at 1e-6 for terms in
    over half the chunks). PostgreSQL: ``ts_rank`` over a ``tsvector`` column. ``chunk_ids``
    restricts the search to those chunks (e.g. one document's, or one embedder's);
    ``require_all`` keeps only chunks containing every query term. Free text goes through
    ``query_terms``, so no input raises a syntax error; no terms -> [].
    """
    terms = query_terms(query)
    if not terms or limit <= 0:
        return []
    ids = None if chunk_ids is None else [int(i) for i in chunk_ids]
    return lexical_source(source).bm25(
        terms, limit=int(limit), chunk_ids=ids, require_all=require_all
    )


# --- query signals: how much each term tells, and how much of it a chunk contains ----------


@dataclass(frozen=True)
class QuerySignals:
    """What the query's words say (shown by the Inspector's "why this ranked"). Measured as
    inputs to a per-query fusion weight (rarest / mean IDF, quotes, digits): no gain on any
    tuning split (benchmarks/retrieval_lab.md); the weight adapts to the lists' margins
    instead (``query_alpha``)."""

    terms: int = 0
    max_idf: float = 0.0  # of the rarest query term, as a share of the largest possible IDF
    mean_idf: float = 0.0  # same scale, averaged over the query's terms
    quoted: bool = False  # the query has a "quoted phrase"
    identifiers: int = 0  # tokens with digits (codes, numbers, years)


def _idf(n: int, total: int) -> float:
    """Lucene's BM25 IDF (never negative)."""
    return math.log(1.0 + (total - n + 0.5) / (n + 0.5))


def term_weights(source: LexicalSource | sqlite3.Connection, query: str) -> dict[str, float]:
    """IDF of each query term over the indexed chunks, as a share of the largest IDF possible
    in this library (a term found in one chunk, or in none: 1.0).

    One count per term (the store stems it as it stems the text)."""
    terms = query_terms(query)
    if not terms:
        return {}
    total, counts = lexical_source(source).term_chunk_counts(terms)
    scale = _idf(1, total) or 1.0
    # a term no chunk contains is as rare as a term can be: it still counts in the
    # query's weight, so a chunk matching only the other words covers less of it
    return {t: _idf(counts[t], total) / scale if counts.get(t) else 1.0 for t in terms}


def terms_in_chunks(
    source: LexicalSource | sqlite3.Connection, terms: Iterable[str], chunk_ids: Sequence[int]
) -> dict[int, set[str]]:
    """Per chunk (of ``chunk_ids``), which of ``terms`` its text contains (as the store stems)."""
    if not chunk_ids:
        return {}
    lex = lexical_source(source)
    got: dict[int, set[str]] = {}
    for t in terms:
        for rowid in lex.chunks_containing(t, chunk_ids):
            got.setdefault(rowid, set()).add(t)
    return got


def coverage_of(contained: Mapping[int, set[str]], weights: Mapping[str, float]) -> dict[int, float]:
    """Per chunk, the share of the query's term weight (IDF) its terms carry, 0-1."""
    total = sum(weights.values())
    if total <= 0:  # no searchable term
        return {}
    return {c: sum(weights.get(t, 0.0) for t in ts) / total for c, ts in contained.items()}


def term_coverage(
    source: LexicalSource | sqlite3.Connection,
    query: str,
    chunk_ids: Sequence[int],
    weights: Mapping[str, float],
) -> dict[int, float]:
    """Per chunk, the share of the query's term weight (IDF) its text contains, 0-1."""
    terms = [t for t, w in weights.items() if w > 0]
    return coverage_of(terms_in_chunks(source, terms, chunk_ids), weights)


def phrase_tokens(text: str) -> list[str]:
    """The words of ``text`` as phrase matching compares them: lower-cased, stopwords dropped,
    each cut to its first PHRASE_PREFIX letters."""
    return [t[:PHRASE_PREFIX] for t in (w.lower() for w in _TOKEN.findall(text or ""))
            if t not in QUERY_STOPWORDS]


def query_pairs(query: str) -> frozenset[tuple[str, str]]:
    """The query's adjacent word pairs ("gaussian curvature", "euler characteristic")."""
    words = phrase_tokens(query)[:MAX_QUERY_TERMS]
    return frozenset(zip(words, words[1:], strict=False))


def phrase_share(query: str, texts: Mapping[int, str]) -> dict[int, float]:
    """Per chunk, the share of the query's adjacent word pairs its text holds side by side, 0-1
    (absent: none). BM25 scores words one by one; this is the proximity it cannot see, so a
    page naming "Gaussian curvature" outranks one with "Gaussian" and "curvature" apart."""
    pairs = query_pairs(query)
    if not pairs:
        return {}
    out: dict[int, float] = {}
    for cid, text in texts.items():
        words = phrase_tokens(text)
        held = pairs & set(zip(words, words[1:], strict=False))
        if held:
            out[cid] = len(held) / len(pairs)
    return out


def query_signals(query: str, weights: Mapping[str, float]) -> QuerySignals:
    """``QuerySignals`` from the query text and its term weights."""
    quoted = bool(re.search(r'["“”].+?["“”]', query or ""))
    if not weights:
        return QuerySignals(quoted=quoted)
    values = list(weights.values())
    return QuerySignals(
        terms=len(values),
        max_idf=max(values),
        mean_idf=sum(values) / len(values),
        quoted=quoted,
        identifiers=sum(1 for t in weights if any(ch.isdigit() for ch in t)),
    )


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


def list_margin(scores: Iterable[float], depth: int = ADAPTIVE_DEPTH) -> float:
    """How peaked a ranked list is, 0-1: ``(best - depth-th best) / best`` (the last score when
    the list is shorter; 0 when the best is not positive). A flat list (the small embedder on a
    language it barely knows: every passage near the same cosine) has a margin near 0; a list
    where a few items stand far above the rest, near 1."""
    ranked = sorted((float(x) for x in scores), reverse=True)
    if not ranked or ranked[0] <= 0:
        return 0.0
    kth = ranked[min(depth, len(ranked)) - 1]
    # capped at 1: a negative k-th score under a tiny best one would give inf, then NaN scores
    return min(1.0, max(0.0, (ranked[0] - kth) / ranked[0]))


def query_alpha(alpha: float, dense_margin: float, lexical_margin: float,
                power: float = ADAPTIVE_POWER) -> float:
    """The dense weight for one query: the base ``alpha`` moved toward the more peaked list.

    ``alpha * md**p / (alpha * md**p + (1 - alpha) * ml**p)``. ``alpha`` 0 and 1 stay pure
    (the Inspector's keyword weight at its ends); ``power`` 0, or two lists without any margin,
    give ``alpha`` unchanged."""
    if power <= 0 or alpha <= 0 or alpha >= 1:
        return alpha
    wd = alpha * max(0.0, dense_margin) ** power
    wl = (1.0 - alpha) * max(0.0, lexical_margin) ** power
    return wd / (wd + wl) if wd + wl > 0 else alpha


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
    coverage: Mapping[int, float] | None = None,
    coverage_power: float | None = None,
    rrf_mix: float | None = None,
    adaptive_power: float | None = None,
    phrase: Mapping[int, float] | None = None,
    phrase_weight: float | None = None,
) -> list[tuple[int, float]]:
    """Merge a dense and a lexical ranking into one, best first: ``[(id, fused_score), ...]``.

    ``dense``/``lexical``: ``[(id, score)]`` (any order; higher is better), ``{id: score}`` or
    ``(ids, scores)`` arrays. Methods:

    - ``"convex"``: ``alpha * norm(dense) + (1 - alpha) * norm(bm25)``; ``normalization`` is
      ``"minmax"`` (each list to [0, 1]), ``"zscore"`` or ``"tmm"`` (theoretical minimum:
      cosine 0, BM25 0; observed maximum). An id missing from one list gets that list's
      lowest normalized value. With ``coverage`` ({id: share of the query's term weight the
      chunk contains, 0-1}, from ``term_coverage``), each normalized BM25 is multiplied by
      ``coverage ** COVERAGE_POWER``: a long chunk repeating one common query word no longer
      outranks a chunk containing the rare ones. ``alpha`` is then adapted to the query by
      ``query_alpha`` from the two lists' margins (``adaptive_power``, None = ADAPTIVE_POWER;
      0 keeps ``alpha`` fixed). With ``phrase`` ({id: share of the query's adjacent word pairs
      the chunk holds, from ``phrase_share``}), ``phrase_weight`` (None = PHRASE_WEIGHT) times
      that share is added.
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
        lex_raw = dict(lx)
        if coverage is not None:
            power = COVERAGE_POWER if coverage_power is None else coverage_power
            weight_of = {i: coverage.get(i, 0.0) ** power for i in l_norm}
            l_norm = {i: v * weight_of[i] for i, v in l_norm.items()}
            lex_raw = {i: v * weight_of[i] for i, v in lex_raw.items()}
        adapt = ADAPTIVE_POWER if adaptive_power is None else adaptive_power
        if adapt:  # margins of the raw scores: the same whatever the normalization
            alpha = query_alpha(alpha, list_margin(s for _, s in d),
                                list_margin(lex_raw.values()), adapt)
        score = {
            i: alpha * d_norm.get(i, d_missing) + (1.0 - alpha) * l_norm.get(i, l_missing)
            for i in order
        }
        if phrase:
            pw = PHRASE_WEIGHT if phrase_weight is None else phrase_weight
            for i, share in phrase.items():
                if i in score:
                    score[i] += pw * share
        mix = RRF_MIX if rrf_mix is None else rrf_mix
        if mix:  # a rank term: 1.0 for first in both lists
            for i in order:
                score[i] += mix * (RRF_MIX_K + 1) / 2 * (
                    1.0 / (RRF_MIX_K + d_rank.get(i, worst)) + 1.0 / (RRF_MIX_K + l_rank.get(i, worst)))
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
