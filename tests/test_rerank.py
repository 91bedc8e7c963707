"""The second-stage rerank: sentence windows, the score mix, the window vector memo, and the
real local embedder preferring the passage whose one late sentence answers the question."""

from __future__ import annotations

import numpy as np
import pytest

from marginalia_core.retrieval import rerank

LONG_SENTENCE = " ".join(f"word{i}" for i in range(200))


def test_windows_cover_every_sentence_in_order_and_respect_the_limit():
    text = ("The mill opened in 1872. It ground wheat for the valley.\n\nA flood closed it in "
            "1885; the owners moved north. Nobody rebuilt it. " * 4)
    windows = rerank.sentence_windows(text, limit=200)
    joined = " ".join(windows)
    for s in rerank.sentences(text):
        assert s in joined
    assert all(len(w) <= 200 for w in windows)
    # consecutive windows share a sentence when the pair fits, so a split fact is seen whole
    sents = rerank.sentences(text)
    assert any(sum(s in a and s in b for s in sents) for a, b in zip(windows, windows[1:],
                                                                      strict=False))


def test_a_run_of_text_without_full_stops_is_cut_into_word_aligned_pieces():
    windows = rerank.sentence_windows(LONG_SENTENCE, limit=100)
    assert len(windows) > 5
    assert all(len(w) <= 100 for w in windows)
    assert " ".join(windows).split() == LONG_SENTENCE.split()


def test_short_pieces_join_a_neighbour():
    assert rerank.sentences("Intro. The long sentence follows here and says a lot.") == [
        "Intro. The long sentence follows here and says a lot."]


def test_combine_mixes_the_normalised_signals():
    fused, sims = [1.0, 0.5, 0.25], [0.2, 0.8, 0.4]
    only_fused = rerank.combine(fused, sims, 0.0)
    assert list(np.argsort(-only_fused)) == [0, 1, 2]
    only_sims = rerank.combine(fused, sims, 1.0)
    assert list(np.argsort(-only_sims)) == [1, 2, 0]
    mixed = rerank.combine(fused, sims, 0.5)
    assert mixed[1] == pytest.approx(0.5 * 0.5 + 0.5 * 1.0)
    mm = rerank.combine(fused, sims, 0.5, how="minmax")
    assert mm.min() >= 0 and mm.max() <= 1


def test_window_cache_embeds_each_text_once_and_forgets_the_oldest():
    calls: list[list[str]] = []

    def embed(texts):
        calls.append(list(texts))
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    cache = rerank.WindowCache(size=3)
    first = cache.vectors(["a", "bb", "a"], embed)
    assert calls == [["a", "bb"]]
    assert [v[0] for v in first] == [1, 2, 1]
    cache.vectors(["bb", "ccc"], embed)
    assert calls[-1] == ["ccc"]
    cache.vectors(["dddd"], embed)  # size 3: "a" (least recently used) goes
    cache.vectors(["a"], embed)
    assert calls[-1] == ["a"]


def test_maxsim_finds_the_answering_sentence_at_the_end_of_a_long_passage(local_embedder):
    filler = ("The committee met on Tuesday to review the annual accounts of the society. "
              "Members discussed the budget for printing and the cost of the hall. ") * 8
    answer = "The lighthouse keeper fed the seabirds every morning at dawn."
    late = filler + answer
    other = filler + "The treasurer asked for receipts to be filed before the spring."
    q = local_embedder.embed_query("who fed the seabirds at dawn?")
    whole = local_embedder.embed_documents([late, other]) @ q
    sims = rerank.maxsim(q, [late, other], local_embedder.embed_documents, rerank.WindowCache())
    # the whole-passage vector barely tells them apart; the best window does
    assert sims[0] - sims[1] > 0.2
    assert sims[0] - sims[1] > 3 * abs(float(whole[0] - whole[1]))
