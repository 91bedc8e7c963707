"""lexical.py against a real in-memory SQLite database built by the project's migrations."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marginalia_core.retrieval import lexical
from marginalia_core.retrieval.lexical import (
    bm25_search,
    fts_query,
    fuse,
    list_margin,
    phrase_share,
    query_alpha,
    query_pairs,
)
from marginalia_core.store.migrations import migrate

PASSAGES = [
    "The mitochondria is the powerhouse of the cell and produces ATP.",
    "Photosynthesis converts sunlight into chemical energy in chloroplasts.",
    "Running shoes reduce knee injuries in long-distance runners.",
    "SQLite is a small, fast, self-contained SQL database engine.",
    "Café culture in Paris: espresso, croissants and naïve tourists.",
]


def _conn() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    migrate(conn)
    return conn


def _add_document(conn: sqlite3.Connection, doc_id: str, texts: list[str]) -> list[int]:
    cols = {r[1] for r in conn.execute("PRAGMA table_info(documents)")}
    row = {
        "id": doc_id,
        "name": doc_id,
        "mime": "text/plain",
        "size": 1,
        "chunk_count": len(texts),
        "content_hash": doc_id,
        "embed_model": "m",
        "embed_dim": 2,
        "chunk_target": 1400,
        "chunk_overlap": 200,
        "created": "2025-01-01",
        "text": "\n\n".join(texts),
        "page_starts": "[0]",
    }
    row = {k: v for k, v in row.items() if k in cols}
    conn.execute(
        f"INSERT INTO documents ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
        list(row.values()),
    )
    ids = []
    for i, t in enumerate(texts):
        cur = conn.execute(
            'INSERT INTO chunks (document_id, idx, content, start, "end", page_start, page_end, '
            "embedding) VALUES (?, ?, ?, 0, ?, 1, 1, ?)",
            (doc_id, i, t, len(t), np.zeros(2, "<f4").tobytes()),
        )
        ids.append(cur.lastrowid)
    return ids


@pytest.fixture(scope="module")
def corpus():
    conn = _conn()
    ids = _add_document(conn, "d1", PASSAGES)
    yield conn, ids
    conn.close()


# --- fts_query / bm25_search -----------------------------------------------------------------


def test_fts_query_quotes_and_drops_stopwords():
    assert fts_query("What is the powerhouse of the cell?") == '"powerhouse" OR "cell"'
    assert fts_query("the of and") is None
    assert fts_query("  ?!..  ") is None
    assert fts_query("") is None
    assert fts_query('NEAR(a b) OR "x" AND title:foo*') == (
        '"near" OR "b" OR "x" OR "title" OR "foo"'
    )


def test_bm25_finds_the_right_chunk(corpus):
    conn, ids = corpus
    hits = bm25_search(conn, "What produces ATP in the cell?")
    assert hits[0][0] == ids[0]
    assert all(score > 0 for _, score in hits)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    # porter stemming: "runs" matches "Running"/"runners"; diacritics folded: "cafe" -> "Café"
    assert bm25_search(conn, "runs")[0][0] == ids[2]
    assert bm25_search(conn, "cafe naive")[0][0] == ids[4]


def test_bm25_limit_filter_and_no_terms(corpus):
    conn, ids = corpus
    assert bm25_search(conn, "the of a") == []
    assert bm25_search(conn, "cell energy sunlight database", limit=1).__len__() == 1
    only = bm25_search(conn, "cell energy sunlight database", chunk_ids=[ids[3]])
    assert [cid for cid, _ in only] == [ids[3]]
    assert bm25_search(conn, "cell", chunk_ids=[]) == []
    assert bm25_search(conn, "zzzunknownzzz") == []


def test_fts_stays_in_step_with_chunks():
    conn = _conn()
    ids = _add_document(conn, "a", ["alpha bravo charlie", "delta echo"])
    assert [c for c, _ in bm25_search(conn, "bravo")] == [ids[0]]
    conn.execute("DELETE FROM chunks WHERE id = ?", (ids[0],))
    assert bm25_search(conn, "bravo") == []
    conn.execute("UPDATE chunks SET content = 'foxtrot golf' WHERE id = ?", (ids[1],))
    assert bm25_search(conn, "echo") == []
    assert [c for c, _ in bm25_search(conn, "golf")] == [ids[1]]
    more = _add_document(conn, "b", ["bravo again"])
    assert [c for c, _ in bm25_search(conn, "bravo")] == more
    conn.execute("DELETE FROM documents WHERE id = 'a'")  # cascade deletes its chunks
    assert bm25_search(conn, "golf") == []
    conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")


FTS_SYNTAX = st.sampled_from(
    [
        '"',
        "'",
        "*",
        "^",
        ":",
        "(",
        ")",
        "-",
        "+",
        "NEAR",
        "AND",
        "OR",
        "NOT",
        "{",
        "}",
        ",",
        "content:",
        "NEAR(",
        "\x00",
        "\\",
        "[",
        "]",
        "%",
        "_",
        "  ",
        "\n",
        "é",
        "ß",
        "İ",
        "\u0301",
        "🙂",
        "中文",
        "the",
        "of",
        "cell",
    ]
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.one_of(FTS_SYNTAX, st.text(max_size=12)), max_size=12).map("".join))
def test_no_input_raises(corpus, text):
    conn, _ = corpus
    hits = bm25_search(conn, text)  # must not raise sqlite3.OperationalError
    assert all(isinstance(c, int) and s >= 0 for c, s in hits)
    q = fts_query(text)
    if q is not None:
        conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (q,)).fetchone()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_fts_query_shape(text):
    q = fts_query(text)
    if q is None:
        return
    for part in q.split(" OR "):
        assert part.startswith('"') and part.endswith('"') and '"' not in part[1:-1]
        assert part[1:-1] and part[1:-1] not in lexical.QUERY_STOPWORDS
    assert len(q.split(" OR ")) <= lexical.MAX_QUERY_TERMS


# --- fuse ------------------------------------------------------------------------------------

METHODS = [
    {"method": "rrf"},
    {"method": "rrf", "k": 1, "weight": 0.3},
    {"method": "convex", "normalization": "minmax"},
    {"method": "convex", "normalization": "zscore"},
    {"method": "convex", "normalization": "tmm"},
    {},  # the defaults
]


@pytest.mark.parametrize("kw", METHODS)
def test_top_in_both_lists_is_first(kw):
    dense = [(7, 0.9), (1, 0.5), (2, 0.4), (3, 0.1)]
    lex = [(7, 12.0), (4, 8.0), (2, 3.0), (5, 1.0)]
    fused = fuse(dense, lex, **kw)
    assert fused[0][0] == 7
    assert sorted(c for c, _ in fused) == [1, 2, 3, 4, 5, 7]
    assert [s for _, s in fused] == sorted((s for _, s in fused), reverse=True)


@pytest.mark.parametrize("kw", METHODS)
def test_input_shapes_agree_and_deterministic(kw):
    dense = [(3, 0.2), (1, 0.8), (2, 0.5)]  # any order in
    lex = {2: 4.0, 9: 6.0}
    arrays = (np.array([1, 2, 3]), np.array([0.8, 0.5, 0.2], dtype=np.float32))
    a = fuse(dense, lex, **kw)
    b = fuse(arrays, list(lex.items()), **kw)
    assert [c for c, _ in a] == [c for c, _ in b]
    assert np.allclose([s for _, s in a], [s for _, s in b])
    assert fuse(dense, lex, **kw) == a


SYMMETRIC = [
    {"method": "rrf", "weight": 0.5},
    {"method": "convex", "normalization": "minmax", "alpha": 0.5},
    {"method": "convex", "normalization": "zscore", "alpha": 0.5},
    {"method": "convex", "normalization": "tmm", "alpha": 0.5},
]


@pytest.mark.parametrize("kw", SYMMETRIC)
def test_ties_are_stable(kw):
    # symmetric lists: 1 and 2 tie on every method; the better single-list rank, then the
    # dense list's order, decides
    dense = [(1, 0.9), (2, 0.5)]
    lex = [(2, 9.0), (1, 5.0)]
    fused = fuse(dense, lex, **kw)
    assert [c for c, _ in fused] == [1, 2]
    flat = fuse([(5, 0.3), (6, 0.3), (4, 0.3)], [], **kw)
    assert [c for c, _ in flat] == [5, 6, 4]


def test_one_sided_and_empty():
    assert fuse([], []) == []
    assert [c for c, _ in fuse([(1, 0.3), (2, 0.9)], None)] == [2, 1]
    assert [c for c, _ in fuse(None, [(1, 1.0), (2, 3.0)])] == [2, 1]
    assert len(fuse([(i, i / 10) for i in range(10)], [], limit=3)) == 3
    with pytest.raises(ValueError):
        fuse([(1, 1.0)], [], method="nope")
    # defaults are asymmetric (ALPHA != 0.5) but ties still resolve by input order
    assert [c for c, _ in fuse([(5, 0.3), (6, 0.3), (4, 0.3)], [])] == [5, 6, 4]
    assert [c for c, _ in fuse([], [(5, 2.0), (6, 2.0)])] == [5, 6]
    # NaN/inf scores do not break ordering
    assert {c for c, _ in fuse([(1, float("nan")), (2, 0.5)], [(3, float("inf"))])} == {1, 2, 3}


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, 30), st.floats(-1, 1, allow_nan=False), max_size=20),
    st.dictionaries(st.integers(0, 30), st.floats(0, 50, allow_nan=False), max_size=20),
    st.sampled_from(METHODS),
)
def test_fuse_properties(dense, lex, kw):
    fused = fuse(dense, lex, **kw)
    assert sorted(c for c, _ in fused) == sorted(set(dense) | set(lex))
    assert [s for _, s in fused] == sorted((s for _, s in fused), reverse=True)
    if len(set(dense.values())) == len(dense):  # no ties: input order is irrelevant
        assert fused == fuse(dict(reversed(list(dense.items()))), lex, **kw)


def test_list_margin_measures_how_peaked_a_list_is():
    flat = [0.41, 0.40, 0.40, 0.39, 0.39]
    peaked = [0.9, 0.3, 0.2, 0.2, 0.1]
    assert list_margin(flat, depth=5) < 0.1 < 0.8 < list_margin(peaked, depth=5)
    assert list_margin(peaked, depth=2) == pytest.approx((0.9 - 0.3) / 0.9)
    assert list_margin([0.5, 0.2], depth=20) == pytest.approx(0.6)  # short list: its last
    assert list_margin([]) == 0.0 and list_margin([0.0, -0.1]) == 0.0
    # a tiny best above a negative score is as peaked as a list gets, not inf (found by the
    # fusion property test: inf made every fused score NaN)
    assert list_margin([2.2250738585e-313, -1.0]) == 1.0
    fused = fuse({0: 2.2250738585e-313, 1: -1.0}, {}, method="convex", normalization="minmax")
    assert [i for i, _ in fused] == [0, 1] and all(math.isfinite(s) for _, s in fused)


def test_query_alpha_moves_the_weight_toward_the_peaked_list():
    assert query_alpha(0.6, 0.1, 0.9) < 0.6 < query_alpha(0.6, 0.9, 0.1)
    assert query_alpha(0.6, 0.5, 0.5) == pytest.approx(0.6)  # equal margins: unchanged
    assert query_alpha(0.6, 0.1, 0.9, power=0) == 0.6  # adaptation off
    assert query_alpha(0.6, 0.0, 0.0) == 0.6  # nothing to go by
    # the Inspector's keyword weight at its ends stays pure
    assert query_alpha(1.0, 0.0, 1.0) == 1.0 and query_alpha(0.0, 1.0, 0.0) == 0.0


def test_fusion_trusts_keywords_when_the_dense_list_is_flat():
    """The small embedder on a language it barely knows gives every passage about the same
    cosine: the fixed weight lets that noise outvote a clear keyword match, the adapted one
    does not."""
    dense = [(1, 0.42), (2, 0.41), (3, 0.39)] + [(i, 0.39) for i in range(4, 30)]
    lex = [(3, 12.0), (1, 2.0)] + [(i, 0.0) for i in (2, *range(4, 30))]
    cov = {3: 1.0, 1: 0.3}
    fixed = fuse(dense, lex, coverage=cov, adaptive_power=0, alpha=0.97)
    adapted = fuse(dense, lex, coverage=cov, alpha=0.97)
    assert fixed[0][0] == 1 and adapted[0][0] == 3


# --- phrase: the query's adjacent word pairs ----------------------------------------------------


def test_phrase_share_counts_the_query_pairs_a_text_holds_side_by_side():
    query = "Gaussian curvature of a closed surface"  # pairs: gaussian-curvature-closed-surface
    texts = {
        1: "The GAUSSIAN curvature of every closed surface is an integer multiple of 2 pi.",
        2: "Curvature is defined here; the Gaussian map comes later. The surface is closed.",
        3: "A closed surface has Gaussian curvature.",  # two of the three pairs
        4: "Nothing relevant at all.",
    }
    share = phrase_share(query, texts)
    # "every" is not a stopword, so text 1 holds gaussian-curvature and closed-surface only
    assert share[1] == pytest.approx(2 / 3)
    assert 2 not in share and 4 not in share  # the words apart, or absent: no phrase
    assert share[3] == pytest.approx(2 / 3)
    assert phrase_share("Gaussian curvature of the closed surface",
                        {5: "gaussian curvature, closed surface"})[5] == 1.0  # punctuation
    assert phrase_share("Möbiusband", texts) == {}  # one word: no pair to look for
    assert query_pairs("curvatures of surfaces") == query_pairs("curvature surface")  # stems


def test_fusion_lifts_the_passage_holding_the_query_phrase():
    dense = [(1, 0.50), (2, 0.50)]
    lex = [(1, 5.0), (2, 5.0)]
    cov = {1: 1.0, 2: 1.0}
    assert [c for c, _ in fuse(dense, lex, coverage=cov)] == [1, 2]  # a tie: given order
    with_phrase = fuse(dense, lex, coverage=cov, phrase={2: 0.5})
    assert [c for c, _ in with_phrase] == [2, 1]
    assert dict(with_phrase)[2] - dict(with_phrase)[1] == pytest.approx(0.5 * lexical.PHRASE_WEIGHT)
    assert [c for c, _ in fuse(dense, lex, coverage=cov, phrase={2: 0.5}, phrase_weight=0)] == [1, 2]
