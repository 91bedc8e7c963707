"""Per-question comparison of the closest fusion_ideas.py variants with the default on the tune
splits: mean nDCG@10 change, a bootstrap 95% interval of it (1,000 resamples of questions, seed 0),
and how many questions went up / down. Tune splits only.

    cd benchmarks && PYTHONPATH=.. python fusion_ideas_paired.py
"""
import random

import fusion_ideas as fi

from marginalia_core.retrieval import evaluation as ev
from marginalia_core.retrieval.retriever import RankedChunk, hits_from


def per_q(p, qs, order):
    out=[]
    for question, q in zip(p.qset.questions, qs):
        ranked=[RankedChunk(c,0.0,0.0,0.0,0.0,0,None,0,False) for c in order(q)]
        out.append(ev.score_question(question, ev.rank_units(hits_from(ranked,p.chunks),question), fi.TOP_K).ndcg)
    return out
def main() -> None:
    data={n: fi.load(n) for n in fi.NAMES}
    V={
     "default": fi.variant(),
     "p5 unord": fi.variant(fi.phrase_variant(prefix=5, unordered=True)),
     "p5 unord w2 g0.5": fi.variant(fi.phrase_variant(prefix=5, unordered=True, window=2, gap_credit=0.5)),
     "unord": fi.variant(fi.phrase_variant(unordered=True)),
     "p5": fi.variant(fi.phrase_variant(prefix=5)),
    }
    for pw in (0.38, 0.42):
        V[f"p5 unord pw{pw}"]=fi.variant(fi.phrase_variant(prefix=5, unordered=True), phrase_weight=pw)
    for pw in (0.35, 0.45):
        V[f"p5 unord w2 g0.5 pw{pw}"]=fi.variant(fi.phrase_variant(prefix=5, unordered=True, window=2, gap_credit=0.5), phrase_weight=pw)
    res={n:{k:per_q(p,qs,o) for k,o in V.items()} for n,(p,qs) in data.items()}
    rng=random.Random(0)
    for k in V:
        line=[k]
        for n in fi.NAMES:
            a, b = res[n]["default"], res[n][k]
            d = [y - x for x, y in zip(a, b, strict=True)]
            mean = sum(d) / len(d)
            up, down = sum(x > 1e-9 for x in d), sum(x < -1e-9 for x in d)
            # bootstrap 95% interval of the mean difference
            bs=sorted(sum(d[rng.randrange(len(d))] for _ in d)/len(d) for _ in range(1000))
            line.append(f"{n} {sum(b)/len(b):.5f} d {mean:+.5f} [{bs[25]:+.4f},{bs[974]:+.4f}] up {up} down {down}")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
