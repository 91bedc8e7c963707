"""Fusion ideas on the tuning splits (SciFact train, SQuAD tune, PDF pages tune), from the
candidates ``retrieval_lab.py --split tune --dump`` pickled, like fusion_grid.py: every variant
re-ranks the same candidates, so nothing is embedded. Tune splits only (no held-out split is read).

    cd benchmarks
    PYTHONPATH=.. python retrieval_lab.py --split tune --dump --no-save --no-cli --no-rerank
    PYTHONPATH=.. python fusion_ideas.py > results/fusion_ideas_tune.txt

Each variant changes one thing against the default (alpha 0.6 adapted per query, BM25 x
coverage, + 0.4 x phrase share) and reports nDCG@10 per split, its change against the default,
and fusion_grid.py's margin (the smallest lead of hybrid over the better of dense and BM25).

The phrase variants recompute the phrase share from the candidates' stored text, for the chunks
holding at least two of the query's terms as the store stems them (``lexical.terms_in_chunks``
on the lab library, exactly as ``Retriever.candidates`` does); the adjacent-pair share so
recomputed is checked against the pickled one.
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
import time
from collections.abc import Callable

import fusion_grid as fg
from _cache import CACHE_DIR

from marginalia_core.retrieval import evaluation as ev
from marginalia_core.retrieval import lexical
from marginalia_core.retrieval.retriever import RankedChunk, hits_from
from marginalia_core.store.sqlite import Store

NAMES = ("scifact", "squad", "pdfs")
LIBRARIES = {"scifact": "lab-scifact-1400-200.sqlite", "squad": "lab-squad-1400-200.sqlite",
             "pdfs": "lab-pdfs.sqlite"}
TOP_K = fg.TOP_K


# --- per-question data, computed once ---------------------------------------------------------


class Q:
    """One question's candidates with everything the variants need."""

    def __init__(self, c, paired: set[int], words: dict[int, list[str]], docs: dict[int, str]):
        self.c = c
        self.dense = list(zip(c.chunk_ids, c.cosine))
        self.lex = list(zip(c.chunk_ids, c.bm25))
        self.coverage = dict(zip(c.chunk_ids, c.coverage))
        self.phrase = c.phrase_of()
        self.paired = paired
        self.words = words  # chunk id -> lower-cased non-stopword tokens (not cut)
        self.qwords = [t.lower() for t in lexical._TOKEN.findall(c.query or "")
                       if t.lower() not in lexical.QUERY_STOPWORDS][: lexical.MAX_QUERY_TERMS]
        self.docs = docs


def words_of(text: str) -> list[str]:
    return [t for t in (w.lower() for w in lexical._TOKEN.findall(text or ""))
            if t not in lexical.QUERY_STOPWORDS]


def load(name: str) -> tuple[ev.Prepared, list[Q]]:
    with open(CACHE_DIR / f"prepared-{name}-tune.pkl", "rb") as f:
        prepared = pickle.load(f)
    store = Store(CACHE_DIR / LIBRARIES[name])
    words = {cid: words_of(row["content"]) for cid, row in prepared.chunks.items()}
    docs = {cid: row["document_name"] for cid, row in prepared.chunks.items()}
    qs = []
    for c in prepared.candidates:
        weights = lexical.term_weights(store.conn, c.query)
        contained = lexical.terms_in_chunks(
            store.conn, [t for t, w in weights.items() if w > 0], c.chunk_ids)
        paired = {cid for cid, terms in contained.items() if len(terms) >= 2}
        qs.append(Q(c, paired, words, docs))
    store.close()
    return prepared, qs


# --- phrase shares ----------------------------------------------------------------------------


def held_pairs(q: Q, cid: int, *, prefix: int, window: int, unordered: bool,
               gap_credit: float) -> tuple[float, int]:
    """(credit of the query's adjacent pairs the chunk holds, number of query pairs). A pair is
    held at distance 1 (credit 1) or, with ``window`` 2+, at distance <= window (credit
    ``gap_credit``); ``unordered`` also accepts the two words in the other order."""
    qw = [w[:prefix] for w in q.qwords]
    pairs = set(zip(qw, qw[1:], strict=False))
    if not pairs:
        return 0.0, 0
    w = [x[:prefix] for x in q.words.get(cid, ())]
    best: dict[tuple[str, str], float] = {}
    for d in range(1, window + 1):
        credit = 1.0 if d == 1 else gap_credit
        if credit <= 0:
            continue
        for a, b in zip(w, w[d:], strict=False):
            for p in ((a, b), (b, a)) if unordered else ((a, b),):
                if p in pairs and best.get(p, 0.0) < credit:
                    best[p] = credit
    return sum(best.values()), len(pairs)


def phrase_variant(*, prefix: int = lexical.PHRASE_PREFIX, window: int = 1,
                   unordered: bool = False, gap_credit: float = 1.0,
                   shape: Callable[[float, int], float] | None = None,
                   only_paired: bool = True):
    """{chunk id: bonus share} for a question; ``shape(held, n_pairs)`` (None: held / n)."""
    cache: dict[int, dict[int, float]] = {}

    def of(q: Q) -> dict[int, float]:
        key = id(q)
        if key not in cache:
            out = {}
            for cid in q.c.chunk_ids:
                if only_paired and cid not in q.paired:
                    continue
                held, n = held_pairs(q, cid, prefix=prefix, window=window, unordered=unordered,
                                     gap_credit=gap_credit)
                if held > 0:
                    out[cid] = shape(held, n) if shape else held / n
            cache[key] = out
        return cache[key]

    return of


def stored_phrase(q: Q) -> dict[int, float]:
    return q.phrase


# --- evaluation -------------------------------------------------------------------------------


def ndcg(prepared: ev.Prepared, qs: list[Q], order: Callable[[Q], list[int]]) -> float:
    total = 0.0
    for question, q in zip(prepared.qset.questions, qs, strict=True):
        ranked = [RankedChunk(cid, 0.0, 0.0, 0.0, 0.0, 0, None, 0, False) for cid in order(q)]
        total += ev.score_question(question, ev.rank_units(hits_from(ranked, prepared.chunks),
                                                           question), TOP_K).ndcg
    return total / max(1, len(qs))


def by_doc(question) -> bool:
    judged = [j for j in question.judgments if j.grade > 0]
    return bool(judged) and all(j.level == "document" for j in judged)


def fused_scores(q: Q, phrase=stored_phrase, **kw) -> list[tuple[int, float]]:
    return lexical.fuse(q.dense, q.lex, coverage=q.coverage, phrase=phrase(q), **kw)


def variant(phrase=stored_phrase, post=None, phrase_scale=None, **kw):
    """An ordering: fuse with ``phrase`` (a function of the question) and ``kw``; ``post``
    re-scores the fused list (q, [(id, score)]) -> [(id, score)]; ``phrase_scale(q)`` multiplies
    the question's phrase shares."""
    def order(q: Q) -> list[int]:
        ph = phrase
        if phrase_scale is not None:
            s = phrase_scale(q)
            ph = lambda q_, f=phrase, s=s: {c: v * s for c, v in f(q_).items()}  # noqa: E731
        fused = fused_scores(q, phrase=ph, **kw)
        if post is not None:
            fused = post(q, fused)
        return [i for i, _ in fused]
    return order


def doc_aggregate(weight: float, *, second_only: bool = True):
    """Each document's best passage gets + ``weight`` x its second-best passage's fused score
    (``second_only`` False: x the sum of all its other passages'), the others unchanged."""
    def post(q: Q, fused):
        seen: dict[str, list[int]] = {}
        for n, (cid, _) in enumerate(fused):
            seen.setdefault(q.docs.get(cid, str(cid)), []).append(n)
        scores = [s for _, s in fused]
        for idxs in seen.values():
            if len(idxs) > 1:
                extra = scores[idxs[1]] if second_only else sum(scores[i] for i in idxs[1:])
                scores[idxs[0]] += weight * extra
        out = [(cid, s) for (cid, _), s in zip(fused, scores, strict=True)]
        out.sort(key=lambda p: -p[1])  # stable: equal scores keep the fused order
        return out
    return post


def with_depth(depth: int, order):
    """Run ``order`` with list_margin's depth set to ``depth``."""
    original = lexical.list_margin

    def run(q: Q):
        lexical.list_margin = lambda scores, depth_=depth: original(scores, depth_)
        try:
            return order(q)
        finally:
            lexical.list_margin = original
    return run


# --- the variants -----------------------------------------------------------------------------


def variants(data) -> list[tuple[str, object]]:
    sat = lambda k: (lambda held, n: 1.0 - math.exp(-held / k))  # noqa: E731
    cap = lambda m: (lambda held, n: min(1.0, held / min(n, m)))  # noqa: E731
    out: list[tuple[str, object]] = [
        ("default (stored phrase share)", variant()),
        ("no phrase", variant(phrase_weight=0.0)),
        ("recomputed adjacent share (must equal default)", variant(phrase_variant())),
    ]
    # proximity window / order
    for window, unordered, gap in ((2, False, 1.0), (2, False, 0.5), (2, True, 1.0),
                                   (1, True, 1.0), (2, True, 0.5), (3, False, 1.0),
                                   (3, False, 0.5), (3, True, 0.5), (4, True, 0.5)):
        name = f"pairs within {window} word(s){', either order' if unordered else ''}" + (
            f", gap credit {gap}" if window > 1 else "")
        out.append((name, variant(phrase_variant(window=window, unordered=unordered,
                                                 gap_credit=gap))))
    # word prefix length
    for prefix in (5, 7, 8):
        out.append((f"prefix {prefix}", variant(phrase_variant(prefix=prefix))))
    # share shaping for long queries
    for m in (3, 4, 5, 6, 8):
        out.append((f"share over min(#pairs, {m})", variant(phrase_variant(shape=cap(m)))))
    for k in (1.0, 2.0, 3.0):
        out.append((f"1 - exp(-held / {k})", variant(phrase_variant(shape=sat(k)))))
    for pw, k in ((0.2, 2.0), (0.3, 2.0), (0.3, 3.0), (0.2, 3.0)):
        out.append((f"1 - exp(-held / {k}), phrase weight {pw}",
                    variant(phrase_variant(shape=sat(k)), phrase_weight=pw)))
    out.append(("sqrt(share)", variant(phrase_variant(shape=lambda h, n: math.sqrt(h / n)))))
    out.append(("sqrt(share), weight 0.3",
                variant(phrase_variant(shape=lambda h, n: math.sqrt(h / n)), phrase_weight=0.3)))
    out.append(("held / sqrt(#pairs), capped 1",
                variant(phrase_variant(shape=lambda h, n: min(1.0, h / math.sqrt(n))))))

    def max_norm(q: Q) -> dict[int, float]:  # share / the best candidate's share
        ph = q.phrase
        top = max(ph.values(), default=0.0)
        return {c: v / top for c, v in ph.items()} if top else {}
    out.append(("share / best candidate's share (tmm-like)", variant(max_norm)))
    out.append(("share / best candidate's share, weight 0.2", variant(max_norm, phrase_weight=0.2)))

    # phrase scaled by the query's lexical weight (phrase is a lexical signal)
    def lex_share(q: Q) -> float:
        a = q.c.query_alpha()
        return (1.0 - a) / (1.0 - lexical.ALPHA)
    out.append(("phrase x (1 - query alpha) / (1 - ALPHA)", variant(phrase_scale=lex_share)))
    # coverage power
    for cp in (0.5, 1.5, 2.0):
        out.append((f"coverage power {cp}", variant(coverage_power=cp)))
    # document aggregation: SciFact only ranks documents; "all" applies it to passage splits too
    for w in (0.1, 0.2, 0.3, 0.5):
        out.append((f"doc score = best + {w} x second best (doc-level sets only)",
                    ("doc", variant(post=doc_aggregate(w)))))
    for w in (0.1, 0.2):
        out.append((f"best + {w} x second best (every set)", variant(post=doc_aggregate(w))))
    for w in (0.05, 0.1):
        out.append((f"doc score = best + {w} x sum of the others (doc-level sets only)",
                    ("doc", variant(post=doc_aggregate(w, second_only=False)))))
    # adaptive depth / power x phrase weight, around the defaults
    for depth in (10, 20, 30):
        for power in (0.4, 0.5, 0.6):
            for pw in (0.35, 0.4, 0.45):
                if (depth, power, pw) == (20, 0.5, 0.4):
                    continue
                out.append((f"depth {depth}, power {power}, phrase {pw}",
                            with_depth(depth, variant(adaptive_power=power, phrase_weight=pw))))
    # round 2: the looser matches that helped, combined
    for prefix, window, gap in ((5, 1, 1.0), (5, 2, 0.5), (5, 2, 0.25), (6, 2, 0.25),
                                (4, 1, 1.0), (4, 1, 1.0)):
        if prefix == 4 and window == 1 and any(n == "R2: prefix 4, either order" for n, _ in out):
            continue
        out.append((f"R2: prefix {prefix}, either order" + (
            f", pairs within {window} words, gap credit {gap}" if window > 1 else ""),
            variant(phrase_variant(prefix=prefix, window=window, unordered=True,
                                   gap_credit=gap))))
    out.append(("R2: prefix 4", variant(phrase_variant(prefix=4))))
    for pw in (0.35, 0.45, 0.5):
        out.append((f"R2: prefix 5, phrase {pw}", variant(phrase_variant(prefix=5),
                                                          phrase_weight=pw)))
        out.append((f"R2: prefix 5, either order, phrase {pw}",
                    variant(phrase_variant(prefix=5, unordered=True), phrase_weight=pw)))
        out.append((f"R2: either order, phrase {pw}",
                    variant(phrase_variant(unordered=True), phrase_weight=pw)))
    # round 3: adjacent word triples beside the pairs (an ordered-window match of three words)
    for prefix, tw in ((6, 0.5), (6, 1.0), (5, 0.5)):
        out.append((f"R3: prefix {prefix}, pairs + {tw} x triples share",
                    variant(ngram_variant(prefix=prefix, triple_weight=tw))))
    return out


def ngram_variant(*, prefix: int, triple_weight: float):
    """(held pairs + w x held triples) / (pairs + w x triples), adjacent and in order."""
    cache: dict[int, dict[int, float]] = {}

    def of(q: Q) -> dict[int, float]:
        if id(q) not in cache:
            qw = [w[:prefix] for w in q.qwords]
            pairs = set(zip(qw, qw[1:], strict=False))
            triples = set(zip(qw, qw[1:], qw[2:], strict=False))
            total = len(pairs) + triple_weight * len(triples)
            out = {}
            for cid in q.c.chunk_ids:
                if cid not in q.paired or not total:
                    continue
                w = [x[:prefix] for x in q.words.get(cid, ())]
                held = len(pairs & set(zip(w, w[1:], strict=False))) + triple_weight * len(
                    triples & set(zip(w, w[1:], w[2:], strict=False)))
                if held:
                    out[cid] = held / total
            cache[id(q)] = out
        return cache[id(q)]
    return of


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="run the variants whose name contains this text")
    args = ap.parse_args()
    data = {}
    for n in NAMES:
        t = time.perf_counter()
        data[n] = load(n)
        print(f"{n}: loaded in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    base = {n: (ndcg(p, qs, lambda q: fg.dense(q.c)), ndcg(p, qs, lambda q: fg.bm25(q.c)))
            for n, (p, qs) in data.items()}
    print("# dense / BM25 nDCG@10: " + ", ".join(f"{n} {d:.4f} / {b:.4f}"
                                                 for n, (d, b) in base.items()), flush=True)
    check = phrase_variant()
    bad = sum(1 for _, qs in data.values() for q in qs
              if any(abs(check(q).get(c, 0.0) - v) > 1e-12 for c, v in q.phrase.items())
              or set(check(q)) != set(q.phrase))
    print(f"# recomputed adjacent-pair shares differing from the pickled ones: {bad} questions",
          flush=True)
    default = None
    print("| variant | SciFact train | SQuAD tune | PDF tune | d SciFact | d SQuAD | d PDF | margin "
          "| passes |", flush=True)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|", flush=True)
    for name, order in variants(data):
        if args.only and args.only not in name and default is not None:
            continue
        doc_only = isinstance(order, tuple)
        if doc_only:
            order = order[1]
        scores = {}
        for n, (p, qs) in data.items():
            if doc_only and not all(by_doc(question) for question in p.qset.questions):
                scores[n] = default[n]  # the evaluation ranks passages: unchanged
            else:
                scores[n] = ndcg(p, qs, order)
        if default is None:
            default = scores
        d = {n: scores[n] - default[n] for n in scores}
        margin = min(scores[n] - max(base[n]) for n in scores)
        passes = d["scifact"] >= 0.003 and d["squad"] >= -0.001 and d["pdfs"] >= -0.001
        print(f"| {name} | " + " | ".join(f"{scores[n]:.4f}" for n in NAMES) + " | "
              + " | ".join(f"{d[n]:+.4f}" for n in NAMES) + f" | {margin:+.4f} | "
              + ("yes" if passes else "") + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
