"""The Retrieval Inspector's charts (Altair specs, no Streamlit): the score histogram with its
threshold, the threshold sweep with the current and suggested thresholds marked, and the
keyword-weight sweep. Kept apart from the page so their layout can be tested as specs."""

from __future__ import annotations

import altair as alt
import pandas as pd

from marginalia_core.retrieval import evaluation as ev

COLORS = {"precision": "#2f7d6d", "recall": "#3b6fb6", "f1": "#c0392b"}
# The sweep chart's y axis runs to SWEEP_HEADROOM (ticks stop at 1): the markers' labels sit in
# that band above every curve, so "now 0.25" never lies on the recall line at 1.0.
SWEEP_HEADROOM = 1.22


def histogram(df: pd.DataFrame, threshold: float) -> alt.LayerChart:
    low = min(0.0, float(df["score"].min()))
    data = df.assign(side=df["passes"].map({True: "passes", False: "below threshold"}))
    bars = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("score:Q", bin=alt.Bin(extent=[low, 1.0], step=0.025),
                    title="Relevance (cosine)"),
            y=alt.Y("count():Q", title="Passages", axis=alt.Axis(tickMinStep=1, format="d")),
            color=alt.Color(
                "side:N",
                scale=alt.Scale(domain=["passes", "below threshold"], range=["#2f7d6d", "#a7a29a"]),
                legend=alt.Legend(title=None, orient="top"),
            ),
            tooltip=[alt.Tooltip("count():Q", title="passages")],
        )
    )
    return (bars + threshold_rule(threshold, "threshold")).properties(height=240)


def threshold_rule(value: float, text: str, color: str = "#c0392b", *, side: str = "right",
                   y: float | None = None, field: str = "threshold") -> alt.LayerChart:
    """A dashed rule at ``value`` with its label. ``side``: the label starts right of the rule
    ("right") or ends left of it ("left"), so two markers at the same threshold do not write
    over each other; ``y`` (data units) puts the label at that height, None at the top."""
    data = pd.DataFrame({field: [value], "text": [f"{text} {value:.2f}"],
                         "label_y": [y if y is not None else 0.0]})
    rule = alt.Chart(data).mark_rule(color=color, strokeWidth=2, strokeDash=[5, 3]).encode(
        x=f"{field}:Q", tooltip=[alt.Tooltip(f"{field}:Q", format=".2f")])
    label = alt.Chart(data).mark_text(
        align="left" if side == "right" else "right", dx=5 if side == "right" else -5,
        color=color, fontWeight="bold",
    ).encode(
        x=f"{field}:Q",
        y=alt.value(10) if y is None else alt.Y("label_y:Q", title=None),
        text="text:N",
    )
    return rule + label


def sweep_chart(sweep: ev.ThresholdSweep, current: float) -> alt.LayerChart:
    """Precision, recall and F1 against the threshold, the current and suggested marked (labels
    in the headroom above the curves, on opposite sides of their rules)."""
    rows = [{"threshold": p.threshold, "measure": m, "value": getattr(p, m)}
            for p in sweep.points for m in ("precision", "recall", "f1")]
    lines = alt.Chart(pd.DataFrame(rows)).mark_line(point=True).encode(
        x=alt.X("threshold:Q", title="Relevance threshold (cosine)"),
        y=alt.Y("value:Q", title=None, scale=alt.Scale(domain=[0, SWEEP_HEADROOM], nice=False),
                axis=alt.Axis(values=[0, 0.2, 0.4, 0.6, 0.8, 1.0])),
        color=alt.Color("measure:N", scale=alt.Scale(domain=list(COLORS),
                                                     range=list(COLORS.values())),
                        legend=alt.Legend(title=None, orient="top")),
        tooltip=["measure:N", alt.Tooltip("threshold:Q", format=".3f"),
                 alt.Tooltip("value:Q", format=".3f")],
    )
    # the lower threshold's label goes left of its rule, the higher one's right
    now_side, suggested_side = (("left", "right") if current <= sweep.suggested
                                else ("right", "left"))
    band = (1.0 + SWEEP_HEADROOM) / 2
    return (lines + threshold_rule(current, "now", "#555", side=now_side, y=band)
            + threshold_rule(sweep.suggested, "suggested", "#c0392b", side=suggested_side,
                             y=band)).properties(height=280)


def weight_chart(sweep: ev.WeightSweep, key: str) -> alt.LayerChart:
    """``key`` and hit@1 against the keyword weight, the weight now and the suggested one
    marked as on the threshold sweep."""
    rows = [{"keyword weight": round(1 - p.alpha, 2), "measure": m, "value": p.metrics[m]}
            for p in sweep.points if p.alpha is not None for m in (key, "hit@1")]
    lines = alt.Chart(pd.DataFrame(rows)).mark_line(point=True).encode(
        x=alt.X("keyword weight:Q", title="Keyword weight (1 − fusion α)"),
        y=alt.Y("value:Q", title=None, scale=alt.Scale(domain=[0, SWEEP_HEADROOM], nice=False),
                axis=alt.Axis(values=[0, 0.2, 0.4, 0.6, 0.8, 1.0])),
        color=alt.Color("measure:N", legend=alt.Legend(title=None, orient="top")),
        tooltip=["measure:N", "keyword weight:Q", alt.Tooltip("value:Q", format=".3f")],
    )
    if sweep.current is None or sweep.best is None:
        return alt.layer(lines).properties(height=260)
    now, best = round(1 - sweep.current, 2), round(1 - sweep.best, 2)
    now_side, best_side = ("left", "right") if now <= best else ("right", "left")
    band = (1.0 + SWEEP_HEADROOM) / 2
    return (lines
            + threshold_rule(now, "now", "#555", side=now_side, y=band, field="keyword weight")
            + threshold_rule(best, "suggested", "#c0392b", side=best_side, y=band,
                             field="keyword weight")).properties(height=260)
