"""Answer metrics in the lab: the answers of a question set under the controls measured
against the expected answers (typed here in Question sets, or a CSV column), beside the
retrieval metrics of the same run; and both configurations of Compare side by side."""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from marginalia_app import passages as margin
from marginalia_app import presentation as fmt
from marginalia_app.inspector.common import Controls, run_guarded
from marginalia_app.inspector.tables import Column, cell, change, show_table
from marginalia_core.chat.answer_metrics import ANSWER_METRICS
from marginalia_core.lab import AnswerResult, RetrievalLab

LABELS = {
    "answer containment": ("Answer contains", "Share of answers holding the expected answer"),
    "first-sentence containment": ("First sentence", "… in their first sentence"),
    "refusals (unanswerable)": ("Refused (no answer)",
                                "Share of questions the library cannot answer that the "
                                "answer refused"),
    "citation precision": ("Citation precision", "Share of citations whose passage supports "
                           "the sentence (ALCE, the support check)"),
    "citation recall": ("Citation recall", "Share of sentences supported by their citations"),
}
ANSWER_COLUMNS = (
    Column("question", "question"), Column("expected", "expected"),
    Column("answer", "answer", html=True), Column("contains", "contains"),
    Column("first", "first sentence"), Column("refused", "refused"),
    Column("cp", "citation precision", numeric=True), Column("cr", "citation recall",
                                                             numeric=True),
)


def metric_row(result: AnswerResult, other: AnswerResult | None = None) -> None:
    cols = st.columns(len(ANSWER_METRICS))
    for col, key in zip(cols, ANSWER_METRICS, strict=True):
        label, help_ = LABELS[key]
        value = result.metrics.get(key)
        base = None if other is None else other.metrics.get(key)
        delta = None if value is None or base is None else f"{value - base:+.3f}"
        col.metric(label, "–" if value is None else f"{value:.3f}", delta=delta, help=help_)


def _answer_cell(text: str) -> str:
    body, _ = margin.passage_html(text, "text/markdown")
    first = " ".join(text.split()[:12]) + ("…" if len(text.split()) > 12 else "")
    return (f"<details><summary>{html.escape(first)}</summary>"
            f'<div class="mg-passage">{body}</div></details>')


def show_result(c: Controls, name: str) -> None:
    got: AnswerResult | None = st.session_state.get("inspector_answers")
    if got is None or got.set_name != name:
        return
    st.markdown(f"**Answers** · answered by {fmt.escape_inline(got.answerer)} · "
                f"{c.label(got.config)}")
    metric_row(got)
    if not any(a.expected for a in got.answers) and all(a.answerable for a in got.answers):
        st.caption("This set has no expected answers yet: type them in Question sets → "
                   "Expected answers, or import a CSV with an answer column.")
    show_table([{"question": a.question, "expected": a.expected or ("(no answer in the "
                 "library)" if not a.answerable else None),
                 "answer": _answer_cell(a.answer), "contains": a.contains,
                 "first": a.first_contains, "refused": a.refused,
                 "cp": a.citation_precision, "cr": a.citation_recall} for a in got.answers],
               ANSWER_COLUMNS)


def compare_button(lab: RetrievalLab, name: str, a: str, b: str, where) -> None:
    """Compare's "Compare answers": both configurations answered and measured."""
    if where.button("Compare answers", key="inspector_compare_answers",
                    icon=":material/fact_check:",
                    help="Answer every question under A and under B and compare the answers"):
        ra = run_guarded(lab.evaluate_answers, name, lab.config(a))
        rb = ra and run_guarded(lab.evaluate_answers, name, lab.config(b))
        if ra is not None and rb is not None:
            st.session_state["inspector_cmp_answers"] = (a, b, ra, rb)


def compare(name: str, a: str, b: str) -> None:
    """The answers of A and B side by side, when "Compare answers" ran for them."""
    got = st.session_state.get("inspector_cmp_answers")
    if got is None or got[2].set_name != name or (got[0], got[1]) != (a, b):
        return
    _, _, ra, rb = got
    st.markdown("**Answers: B against A**")
    metric_row(rb, ra)
    rows = []
    for key in ANSWER_METRICS:
        va, vb = ra.metrics.get(key), rb.metrics.get(key)
        rows.append({"measure": LABELS[key][0], "a": cell(va), "b": cell(vb),
                     "change": change(None if va is None or vb is None else vb - va)})
    show_table(rows, (Column("measure", "measure"), Column("a", "A", numeric=True),
                      Column("b", "B", numeric=True),
                      Column("change", "change", numeric=True, html=True)))


def editor(lab: RetrievalLab, names: list[str]) -> None:
    """Question sets → Expected answers: type the answer each question should get."""
    st.markdown("**Expected answers**",
                help="What a right answer contains, per question (Evaluate answers measures "
                "it). A question with no ticked passage is one the library cannot answer: a "
                "right answer refuses it.")
    name = st.selectbox("Set", names, key="inspector_answers_set")
    qset = lab.get_set(name)
    frame = pd.DataFrame([{"id": q.id, "question": q.text, "expected answer": q.answer}
                          for q in qset.questions])
    edited = st.data_editor(
        frame, hide_index=True, width="stretch", key=f"inspector_answers_edit_{name}",
        disabled=["id", "question"],
        column_config={"id": None, "question": st.column_config.TextColumn(width="large"),
                       "expected answer": st.column_config.TextColumn(width="medium")})
    changed = {r["id"]: str(r["expected answer"] or "") for r in edited.to_dict("records")
               if str(r["expected answer"] or "") != next(q.answer for q in qset.questions
                                                          if q.id == r["id"])}
    if st.button("Save expected answers", key="inspector_answers_save",
                 icon=":material/save:", disabled=not changed) and \
            run_guarded(lab.set_answers, name, changed) is not None:
        st.success(f"Saved {fmt.plural(len(changed), 'expected answer')}.", icon=":material/check_circle:")
