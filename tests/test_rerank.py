"""The second-stage rerank: sentence windows, the score mix, the window vector memo, and the
real local embedder preferring the passage whose one late sentence answers the question."""

from __future__ import annotations

import numpy as np

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


KEEPER = ("The lighthouse keeper kept a diary of the weather and the ships that passed. "
          + ("The committee met on Tuesday to review the annual accounts of the society. "
             "Members discussed the budget for printing and the cost of renting the hall. ") * 3
          + "Every morning at dawn the keeper fed the seabirds on the rocks below the tower.")
HARBOUR = ("The harbour master counted the fishing boats at dawn and wrote the tides in his "
           "book. ") * 4


def test_the_sentences_reranker_reaches_chat_through_the_settings(workspace):
    """Chosen by name (RetrievalConfig.reranker), the sentence-window rerank changes what Chat's
    search returns: the whole-passage vector of the keeper's passage is mostly committee
    minutes, so dense order puts the harbour passage first; the keeper's best window answers
    the question and wins once windows count. Lexical order is left as it is."""
    from marginalia_core.ingest.pipeline import ingest_bytes

    for name, text in {"keeper.txt": KEEPER, "harbour.txt": HARBOUR}.items():
        events = list(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                                   name, text.encode()))
        assert events[-1]["type"] == "done"
    question = "who fed the seabirds at dawn?"
    list(workspace.apply_settings({"threshold": -1.0, "mode": "dense"}))
    assert [h.document_name for h in workspace.search(question)] == ["harbour.txt", "keeper.txt"]
    lexical_before = [h.chunk_id for h in workspace.search(question, mode="lexical")]

    list(workspace.apply_settings({"reranker": rerank.SENTENCE_RERANKER}))
    assert workspace.settings.retrieval.reranker == "sentences"
    assert [h.document_name for h in workspace.search(question)] == ["keeper.txt", "harbour.txt"]
    assert workspace.search(question, mode="hybrid")[0].document_name == "keeper.txt"
    assert [h.chunk_id for h in workspace.search(question, mode="lexical")] == lexical_before
    reranker = workspace.retriever.reranker(rerank.SENTENCE_RERANKER)
    assert isinstance(reranker, rerank.SentenceWindows)
    assert len(reranker.cache._vecs) >= 4  # the keeper's windows were embedded and memoised


def test_the_rerank_step_fuses_with_the_configured_keyword_weight(workspace, monkeypatch):
    """The reranker receives the configuration's fusion weight (it used to re-fuse with the
    module default, so the Inspector's slider and a saved alpha stopped at the rerank step)."""
    from marginalia_core.ingest.pipeline import ingest_bytes

    seen: list[float] = []

    class Spy(rerank.KeepOrder):
        def rerank(self, query, ranked, passages, *, alpha=rerank.lexical.ALPHA):
            seen.append(alpha)
            return list(ranked)

    monkeypatch.setitem(rerank.RERANKERS, "spy", Spy)
    for name, text in {"keeper.txt": KEEPER, "harbour.txt": HARBOUR}.items():
        events = list(ingest_bytes(workspace.store, workspace.embedder, workspace.settings,
                                   name, text.encode()))
        assert events[-1]["type"] == "done"
    question = "who fed the seabirds at dawn?"
    list(workspace.apply_settings({"threshold": -1.0, "reranker": "spy", "alpha": 0.3}))
    workspace.search(question)
    assert seen == [0.3]
