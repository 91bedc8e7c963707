"""Question sets in the real SQLite database: save / load, imports (CSV, BEIR, JSON lines) that
refuse a bad file whole, exports that read back the same, judgments matched by document + page
or text span, and saved configurations."""

from __future__ import annotations

import json

import pytest

from marginalia_core.store import question_sets as qs
from marginalia_core.store.question_sets import Judgment, Question, QuestionSet, QuestionSets

pytestmark = pytest.mark.both_backends


@pytest.fixture
def sets(store) -> QuestionSets:
    return QuestionSets(store)


def sample() -> QuestionSet:
    return QuestionSet(
        "sample",
        [
            Question("Where do bees dance?", (Judgment("bees.pdf", 2, 3),), "b1"),
            Question("What is ZX-4471?", (Judgment("codes.txt", 1, 1, 10, 60, 2, "Error code"),
                                          Judgment("manual.pdf")), "c1"),
        ],
        description="two questions",
    )


@pytest.mark.sqlite_only
def test_migration_creates_the_lab_tables(store):
    names = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"question_sets", "questions", "judgments", "retrieval_configs",
            "embedding_cache"} <= names
    from marginalia_core.store.migrations import applied

    assert "m005_retrieval_lab" in applied(store.conn)


def test_save_and_load_round_trip(sets):
    summary = sets.save(sample())
    assert (summary.name, summary.questions, summary.judgments) == ("sample", 2, 3)
    got = sets.get("sample")
    assert got.description == "two questions"
    assert [q.id for q in got.questions] == ["b1", "c1"]
    assert got.questions[1].judgments == sample().questions[1].judgments
    assert [s.name for s in sets.list()] == ["sample"]


def test_a_second_set_of_the_same_name_is_refused_unless_replacing(sets):
    sets.save(sample())
    with pytest.raises(qs.QuestionSetError, match="already exists"):
        sets.save(sample())
    smaller = QuestionSet("sample", [Question("Only one?", (Judgment("a.txt"),))])
    assert sets.save(smaller, replace=True).questions == 1
    assert len(sets.get("sample").questions) == 1
    assert sets.store.conn.execute("SELECT count(*) FROM judgments").fetchone()[0] == 1


def test_missing_set_names_the_existing_ones(sets):
    sets.save(sample())
    with pytest.raises(qs.QuestionSetError, match="sample"):
        sets.get("nope")


def test_a_failing_save_writes_nothing(sets):
    bad = QuestionSet("dup", [Question("a?", (), "x"), Question("b?", (), "x")])
    with pytest.raises(qs.QuestionSetError, match="twice"):
        sets.save(bad)
    assert sets.list() == []
    assert sets.store.conn.execute("SELECT count(*) FROM questions").fetchone()[0] == 0


def test_csv_import_pages_ranges_and_whole_documents(sets):
    text = ("question,document,page\n"
            "Where do bees dance?,bees.pdf,3\n"
            "Where do bees dance?,bees.pdf,5-6\n"
            "What is ZX-4471?,codes.txt,\n")
    qset = qs.read_csv(text, name="csv")
    assert [q.text for q in qset.questions] == ["Where do bees dance?", "What is ZX-4471?"]
    assert qset.questions[0].judgments == (Judgment("bees.pdf", 3, 3), Judgment("bees.pdf", 5, 6))
    assert qset.questions[1].judgments[0].level == "document"
    sets.save(qset)
    assert sets.summary("csv").judgments == 3


@pytest.mark.parametrize("row, why", [
    ("Where?,bees.pdf,three", "line 3: page must be a number"),
    ("Where?,bees.pdf,5-2", "line 3: page range"),
    (",bees.pdf,1", "line 3: expected question,document"),
])
def test_a_bad_csv_row_refuses_the_whole_file(sets, tmp_path, row, why):
    path = tmp_path / "set.csv"
    path.write_text(f"question,document,page\nFine?,a.pdf,1\n{row}\n", encoding="utf-8")
    with pytest.raises(qs.QuestionSetError, match=why) as err:
        sets.save(qs.read_file(path, name="x"))
    assert "Nothing was imported" in err.value.message
    assert sets.list() == []


def test_beir_import_skips_the_header_and_zero_grades(tmp_path):
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join(json.dumps(q) for q in [
        {"_id": "1", "text": "bees dance"}, {"_id": "2", "text": "fan stalled"},
        {"_id": "3", "text": "never judged"},
    ]) + "\n", encoding="utf-8")
    qrels = tmp_path / "test.tsv"
    qrels.write_bytes(b"query-id\tcorpus-id\tscore\r\n1\tdoc-a\t1\r\n1\tdoc-b\t2\r\n2\tdoc-c\t0\r\n")
    qset = qs.read_beir(queries, qrels, name="beir")
    assert [q.id for q in qset.questions] == ["1"]  # query 2 has only a zero grade
    assert qset.questions[0].judgments == (Judgment("doc-a", grade=1), Judgment("doc-b", grade=2))


def test_beir_qrels_naming_an_unknown_query_is_refused(tmp_path):
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"_id": "1", "text": "q"}) + "\n", encoding="utf-8")
    qrels = tmp_path / "test.tsv"
    qrels.write_text("1\td\t1\n9\td\t1\n", encoding="utf-8")
    with pytest.raises(qs.QuestionSetError, match="line 2: query '9'"):
        qs.read_beir(queries, qrels, name="beir")


def test_jsonl_export_reads_back_the_same(sets):
    sets.save(sample())
    exported = "\n".join(qs.write_jsonl(sets.get("sample")))
    again = qs.read_jsonl(exported, name="again")
    assert [(q.id, q.text, q.judgments) for q in again.questions] == [
        (q.id, q.text, q.judgments) for q in sample().questions
    ]
    csv_text = qs.write_csv(sets.get("sample"))
    assert csv_text.splitlines()[1] == "Where do bees dance?,bees.pdf,2-3"
    assert "What is ZX-4471?,manual.pdf," in csv_text


def test_the_project_pdf_question_set_parses():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "questions" / "pdfs_pages.jsonl"
    qset = qs.read_file(path, name="pdfs")
    assert len(qset.questions) >= 40
    assert len({j.document for q in qset.questions for j in q.judgments}) >= 10
    assert all(j.level == "page" for q in qset.questions for j in q.judgments)


def test_judgment_matching_by_page_span_and_document():
    chunk = {"document_name": "a.pdf", "document_id": "id1", "start": 100, "end": 300,
             "page_start": 2, "page_end": 3}
    assert Judgment("a.pdf").matches(chunk)
    assert Judgment("id1").matches(chunk)  # BEIR corpus ids can be document ids
    assert not Judgment("b.pdf").matches(chunk)
    assert Judgment("a.pdf", 3, 4).matches(chunk)
    assert not Judgment("a.pdf", 4, 4).matches(chunk)
    assert Judgment("a.pdf", span_start=150, span_end=250).matches(chunk)  # inside the chunk
    assert Judgment("a.pdf", span_start=0, span_end=400).matches(chunk)  # covers the chunk
    assert not Judgment("a.pdf", span_start=250, span_end=450).matches(chunk)  # 50 of 200 chars
    assert not Judgment("a.pdf", span_start=300, span_end=400).matches(chunk)


def test_saved_configurations(sets):
    sets.save_config("lexical k10", {"mode": "lexical", "top_k": 10})
    sets.save_config("lexical k10", {"mode": "lexical", "top_k": 12})  # updates in place
    assert sets.configs() == {"lexical k10": {"mode": "lexical", "top_k": 12}}
    with pytest.raises(qs.QuestionSetError, match="lexical k10"):
        sets.config("other")
    assert sets.delete_config("lexical k10") and sets.configs() == {}


def test_applied_settings_replace_each_other(sets):
    """Migration m010 / p003: the lab's applied settings are one JSON value per key, replaced
    as a whole (a None value is left out, so that setting falls back to its default)."""
    store = sets.store
    assert store.library_settings() == {}
    store.save_library_settings({"retrieval_mode": "lexical", "top_k": 7, "min_score": None})
    assert store.library_settings() == {"retrieval_mode": "lexical", "top_k": 7}
    store.save_library_settings({"top_k": 3})
    assert store.library_settings() == {"top_k": 3}
    store.save_library_settings({})
    assert store.library_settings() == {}


def test_expected_answers_from_csv_round_trip_and_can_be_typed(store):
    text = ("question,document,page,answer\n"
            "Where do bees dance?,bees.pdf,2,in the hive\n"
            "Who painted the moon?,,,\n")
    qset = qs.read_csv(text, name="answers")
    assert [(q.text, q.answer, q.answerable) for q in qset.questions] == [
        ("Where do bees dance?", "in the hive", True), ("Who painted the moon?", "", False)]
    sets = qs.QuestionSets(store)
    sets.save(qset)
    again = sets.get("answers")
    assert [q.answer for q in again.questions] == ["in the hive", ""]
    assert qs.read_csv(qs.write_csv(again), name="x").questions == [
        qs.Question(q.text, q.judgments, "", q.answer) for q in again.questions]
    sets.set_answers("answers", {again.questions[1].id: "nobody"})
    assert sets.get("answers").questions[1].answer == "nobody"
    with pytest.raises(qs.QuestionSetError, match="nothing was changed"):
        sets.set_answers("answers", {"q9": "x", again.questions[0].id: "changed"})
    assert sets.get("answers").questions[0].answer == "in the hive"
    back = qs.read_jsonl("".join(line + "\n" for line in qs.write_jsonl(again)), name="y")
    assert [q.answer for q in back.questions] == ["in the hive", ""]
