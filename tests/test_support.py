"""Every cited sentence checked against the passage it cites (marginalia_core/chat/support.py):
the check itself, ALCE citation precision / recall, and the chat engine applying it to every
answer (extractive, and Gemini's through the real SDK and the fake server), saved with it."""

from __future__ import annotations

import pytest
from test_chat import BEES, MILL, gemini_ws, ingest, run  # noqa: F401

from marginalia_core.chat.support import (
    SUPPORT_FLOOR,
    answer_sentences,
    check_support,
    citation_quality,
    support_score,
)

SOURCES = [
    {"n": 1, "content": MILL},
    {"n": 2, "content": BEES},
]


def test_sentences_keep_their_marks_even_after_the_full_stop():
    text = "The mill dates from 1851 [1]. Bees make honey. [2] A list:\n- wax combs [2]\n- a queen"
    assert answer_sentences(text) == [
        ("The mill dates from 1851 [1].", (1,)),
        ("Bees make honey. [2]", (2,)),
        ("A list:", ()),
        ("- wax combs [2]", (2,)),
        ("- a queen", ()),
    ]


def test_a_sentence_in_its_passage_is_supported_and_one_citing_the_wrong_passage_is_not():
    checked = check_support(
        "The mill was built in 1851 by the Carter family [1]. "
        "Worker bees turn nectar into honey [1]. A colony holds sixty thousand bees [2].",
        SOURCES,
    )
    assert [c.supported for c in checked] == [True, False, True]
    assert checked[0].score == pytest.approx(1.0)
    assert checked[1].score < SUPPORT_FLOOR and checked[1].marks == (1,)
    assert checked[0].as_dict() == {"sentence": "The mill was built in 1851 by the Carter family [1].",
                                     "marks": [1], "score": 1.0, "supported": True}


def test_a_wrong_number_or_a_misquotation_is_unsupported():
    # every word is in the passage but the year is not
    assert support_score("The mill was built in 1852 by the Carter family.", [MILL]) < SUPPORT_FLOOR
    quoted = "The passage says the mill “ground wheat for the whole valley” [1]."
    misquoted = "The passage says the mill “ground corn for the whole valley” [1]."
    assert check_support(quoted, SOURCES)[0].supported
    assert not check_support(misquoted, SOURCES)[0].supported
    # a mark that matches no source has no passage to hold it
    assert not check_support("The mill dates from 1851 [7].", SOURCES)[0].supported


def test_a_paraphrase_is_rescued_by_the_local_embedder(local_embedder):
    sentence = "A flood in 1912 wrecked the wheel of the mill and it was left empty [1]."
    lexical = support_score(sentence, [MILL])
    blended = support_score(sentence, [MILL], local_embedder)
    assert lexical < blended
    assert check_support(sentence, SOURCES, local_embedder)[0].supported
    # an unrelated claim stays unsupported with the embedder too
    assert not check_support("Queens rule the colony of worker bees [1].", SOURCES,
                             local_embedder)[0].supported


def test_alce_precision_and_recall():
    # sentence 1: supported by [1]; [2] is irrelevant (it alone does not hold it, [1] suffices)
    # sentence 2: unsupported (wrong passage): its citation is not relevant, recall misses it
    # sentence 3: no mark at all: counts against recall
    quality = citation_quality(
        "The mill was built in 1851 by the Carter family [1][2]. "
        "A strong colony holds sixty thousand bees [1]. Nothing else is known.",
        SOURCES,
    )
    assert (quality.sentences, quality.supported, quality.citations, quality.relevant) == (3, 1, 3, 1)
    assert quality.recall == pytest.approx(1 / 3) and quality.precision == pytest.approx(1 / 3)
    both = citation_quality("The mill was built in 1851 [1] and colonies hold sixty thousand "
                            "bees in summer [2].", SOURCES)
    assert both.precision == 1.0 and both.recall == 1.0  # each passage holds its half: both needed


def test_every_extractive_answer_carries_its_support_and_saves_it(workspace):
    ingest(workspace, "mill.txt", MILL)
    ingest(workspace, "bees.txt", BEES)
    done = run(workspace, "When was the mill built?")[-1]
    assert done["type"] == "done" and done["support"]
    assert all(s["supported"] for s in done["support"])  # quoted verbatim: always in its passage
    assert all(s["marks"] and s["sentence"] in done["answer"] for s in done["support"])
    (_, assistant) = workspace.store.messages(done["conversation_id"])
    assert assistant.support == done["support"]


def test_a_gemini_answer_citing_the_wrong_passage_is_flagged_and_saved(gemini_ws, fake_gemini):  # noqa: F811
    ws = gemini_ws()
    ingest(ws, "mill.txt", MILL)
    ingest(ws, "bees.txt", BEES)
    meta_sources = run(ws, "Tell me about the mill and the bees")[0]["sources"]
    mill_n = next(s["n"] for s in meta_sources if s["document_name"] == "mill.txt")
    bees_n = next(s["n"] for s in meta_sources if s["document_name"] == "bees.txt")
    fake_gemini.set_answer(f"The mill was built in 1851 by the Carter family [{mill_n}]. "
                           f"Worker bees turn nectar into honey [{mill_n}]. "
                           f"A colony holds sixty thousand bees [{bees_n}].")
    done = run(ws, "Tell me about the mill and the bees")[-1]
    assert done["type"] == "done"
    assert [s["supported"] for s in done["support"]] == [True, False, True]
    wrong = done["support"][1]
    assert wrong["marks"] == [1] and "Worker bees" in wrong["sentence"]  # renumbered: mill is [1]
    (_, assistant) = ws.store.messages(done["conversation_id"])
    assert assistant.support == done["support"]


def test_a_question_without_sources_has_nothing_to_check(workspace):
    ingest(workspace, "mill.txt", MILL)  # an empty library is a notice, not an answer
    done = run(workspace, "What is in my library?", threshold=0.999)[-1]
    assert done["type"] == "done" and done["sources"] == [] and done["support"] == []
