"""The three sweeps of Evaluate and tune, each with the value now, the suggested one (the best
that keeps the recall floor; a tie keeps the value now), what the change costs and gains, a
warning when it would leave a question with no passage, and a button that puts it into the
controls. The passage-size sweep says what it will embed before it starts."""

from __future__ import annotations

from typing import Any

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_app.charts import sweep_chart, weight_chart
from marginalia_app.inspector.common import Controls, progress_callback, run_guarded
from marginalia_app.inspector.tables import Column, show_table
from marginalia_core.retrieval import evaluation as ev

SIZE_COLUMNS = (
    Column("mark", ""), Column("size", "passage size / overlap"),
    Column("passages", "passages", numeric=True, fmt="d"),
    Column("embedded", "embedded now", numeric=True, fmt="d"),
    Column("recall", "found", numeric=True), Column("ndcg", "nDCG@10", numeric=True),
    Column("mrr", "MRR", numeric=True), Column("hit1", "right on top", numeric=True),
    Column("answered", "answered", numeric=True),
)


def show(c: Controls, name: str) -> None:
    state = st.session_state
    tsweep: ev.ThresholdSweep | None = state.get("inspector_tsweep")
    if tsweep is not None:
        _threshold(c, tsweep)
    wsweep: ev.WeightSweep | None = state.get("inspector_wsweep")
    if wsweep is not None:
        _weight(c, wsweep)
    csweep = state.get("inspector_csweep")
    if csweep is not None and csweep.set_name == name:
        _sizes(c, csweep)


def _set(values: dict[str, Any]) -> None:
    """A "use" button's callback: the suggested value into the controls."""
    for key, value in values.items():
        st.session_state[key] = st.session_state[f"_kept_{key}"] = value


def _empty_warning(where: str, empty: tuple[str, ...]) -> None:
    if empty:
        st.warning(f"{where}, {fmt.plural(len(empty), 'question')} would get no passage at all: "
                   + "; ".join(f"“{fmt.escape_inline(q, 80)}”" for q in empty[:3])
                   + ("…" if len(empty) > 3 else ""), icon=":material/warning:")


def _threshold(c: Controls, sweep: ev.ThresholdSweep) -> None:
    now, sug = sweep.at(sweep.current), sweep.at(sweep.suggested)
    with st.container(border=True, key="inspector_tsweep_card"):
        st.markdown(f"**Threshold sweep** · now {sweep.current:.2f} · suggested "
                    f"{sweep.suggested:.2f}",
                    help="The suggestion is the highest threshold that keeps the share of "
                    f"ticked passages found at {sweep.floor:.2f} or more; F1 alone would "
                    "trade found passages for precision.")
        st.altair_chart(sweep_chart(sweep, sweep.current), width="stretch")
        if sweep.suggested == sweep.current:
            st.caption(f"No higher threshold keeps found at {sweep.floor:.2f} or more: keep "
                       f"{sweep.current:.2f}.")
        else:
            st.caption(
                f"At {sweep.suggested:.2f}: found {now.recall:.2f} → {sug.recall:.2f}, "
                f"precision {now.precision:.2f} → {sug.precision:.2f}, passages per question "
                f"{now.returned:.1f} → {sug.returned:.1f}.")
        best = sweep.at(sweep.best_f1) if sweep.best_f1 is not None else None
        if best is not None and best.threshold != sweep.suggested and best.recall < sweep.floor:
            st.caption(f"Best F1 would be {best.threshold:.2f} (F1 {best.f1:.2f}), but it finds "
                       f"only {best.recall:.2f} of the ticked passages (now {now.recall:.2f}).")
        _empty_warning(f"At {sweep.suggested:.2f}", sug.empty)
        st.button(f"Use the suggested threshold {sweep.suggested:.2f}",
                  key="inspector_use_suggested", disabled=sweep.suggested == c.threshold,
                  on_click=_set, args=({"inspector_threshold":
                                        max(0.0, min(1.0, sweep.suggested))},))


def _weight(c: Controls, sweep: ev.WeightSweep) -> None:
    lab = c.lab
    kw = {p.alpha: lab.keyword_weight(ev.EvalConfig(mode="hybrid", alpha=p.alpha))
          for p in sweep.points}
    now, sug = sweep.at(sweep.current), sweep.at(sweep.best)
    k = c.top_k
    with st.container(border=True, key="inspector_wsweep_card"):
        st.markdown(f"**Keyword weight sweep** · now {kw[sweep.current]:.2f} · suggested "
                    f"{kw[sweep.best]:.2f}",
                    help=f"The suggestion has the best {sweep.key} of the weights that find "
                    f"at least {sweep.floor:.2f} of the ticked passages; a tie keeps the "
                    "weight now.")
        st.altair_chart(weight_chart(sweep, sweep.key), width="stretch")
        if sweep.best == sweep.current:
            st.caption("No weight does better than the one now: keep it.")
        else:
            st.caption(f"At {kw[sweep.best]:.2f}: {sweep.key} {now.metrics[sweep.key]:.3f} → "
                       f"{sug.metrics[sweep.key]:.3f}, found {now.metrics[f'recall@{k}']:.2f} "
                       f"→ {sug.metrics[f'recall@{k}']:.2f}.")
        _empty_warning(f"At {kw[sweep.best]:.2f}", sug.empty)
        st.button(f"Use the suggested keyword weight {kw[sweep.best]:.2f}",
                  key="inspector_use_weight",
                  disabled=sweep.best == sweep.current or c.mode != "hybrid",
                  on_click=_set, args=({"inspector_keyword": kw[sweep.best]},))


def passage_size_run(c: Controls, name: str, row: Any, bar: Any) -> None:
    """After "Sweep passage size": what it would embed, then the sweep on "Start"."""
    state = st.session_state
    asked = state.get("inspector_csweep_ask")
    if not asked or asked[0] != name:
        return
    cost = run_guarded(c.lab.chunk_sweep_cost, config=c.config)
    if cost is None:
        state.pop("inspector_csweep_ask", None)
        return
    with st.container(border=True, key="inspector_csweep_cost"):
        st.markdown(
            f"**Passage size sweep** · {cost.passages:,} passages in {cost.sizes} sizes; "
            + (f"{cost.to_embed:,} not embedded before ({cost.characters:,} characters) "
               "will be embedded now." if cost.to_embed else
               "all already embedded: it only searches."))
        start = st.container(horizontal=True, gap="small")
        go = start.button("Start the sweep", type="primary", key="inspector_sweep_c_start",
                          icon=":material/play_arrow:")
        stop = start.button("Not now", key="inspector_sweep_c_cancel",
                            help="Also stops a running sweep")
    if stop:
        state.pop("inspector_csweep_ask", None)
        st.rerun()
    if go:
        state.pop("inspector_csweep_ask", None)
        sweep = run_guarded(c.lab.chunk_sweep, name, config=c.config, floor=asked[1],
                            progress=progress_callback(bar))
        if sweep is not None:
            state["inspector_csweep"] = sweep
            st.rerun()


def _sizes(c: Controls, sweep: Any) -> None:
    k = c.top_k
    rows, classes = [], []
    for p in sweep.points:
        size = (p.target, p.overlap)
        marks = [m for m, v in (("now", sweep.current), ("suggested", sweep.best)) if v == size]
        m = p.result.metrics
        rows.append({"mark": " · ".join(marks), "size": f"{p.target} / {p.overlap}",
                     "passages": p.chunks, "embedded": p.embedded_now,
                     "recall": m.get(f"recall@{k}"), "ndcg": m.get("ndcg@10"),
                     "mrr": m.get(f"mrr@{k}"), "hit1": m.get("hit@1"),
                     "answered": m.get("answered")})
        classes.append("suggested" if size == sweep.best else "now" if size == sweep.current
                       else "")
    t, o = sweep.best
    with st.container(border=True, key="inspector_csweep_card"):
        st.markdown(f"**Passage size sweep** · now {sweep.current[0]} / {sweep.current[1]} · "
                    f"suggested {t} / {o}",
                    help=f"The suggestion has the best {sweep.key} of the sizes that find at "
                    f"least {sweep.floor:.2f} of the ticked passages; a tie keeps the size now.")
        show_table(rows, SIZE_COLUMNS, classes)
        best = next(p for p in sweep.points if (p.target, p.overlap) == sweep.best)
        _empty_warning(f"At {t} / {o}", tuple(q.question for q in best.result.questions
                                              if q.judgments and not q.returned))
        st.button(f"Use passage size {t} / {o}", key="inspector_use_size",
                  disabled=sweep.best == sweep.current,
                  help="Puts it into the settings above; Apply to Chat re-indexes.",
                  on_click=_set, args=({"inspector_target": t, "inspector_overlap": o},))
