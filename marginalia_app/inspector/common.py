"""What the Inspector's sections share: the frozen controls value, labels, widget state kept
across page switches, guarded lab calls and progress bars."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from marginalia_app import presentation as fmt
from marginalia_core.errors import MarginaliaError
from marginalia_core.lab import RetrievalLab
from marginalia_core.retrieval import evaluation as ev

MODE_LABELS = {"hybrid": "Meaning + keywords", "dense": "Meaning only", "lexical": "Keywords only"}
MODE_HELP = (
    "**Meaning + keywords** (hybrid): the cosine-similarity and BM25 rankings fused. "
    "**Meaning only** (dense): cosine similarity of the embeddings. "
    "**Keywords only** (lexical): BM25 keyword matches, with a relevance floor of its own."
)
RERANK_LABELS = {"none": "None", "sentences": "Sentence windows"}
RERANK_HELP = (
    "A second look at the best passages before the top k is taken. **None**: the fused order "
    "stands. **Sentence windows**: the top 10 are scored again by their best few sentences "
    "against the question, which finds an answer late in a long passage (about 90 ms more per "
    "question on this machine's measure; benchmarks/README.md)."
)
# Widget values kept across page switches: Streamlit drops a widget's state when its page is
# not shown, so each is mirrored in a plain session key and restored on return.
KEPT = ("inspector_query", "inspector_threshold", "inspector_mode", "inspector_k",
        "inspector_keyword", "inspector_target", "inspector_overlap", "inspector_rerank",
        "inspector_section",
        "inspector_set", "inspector_docs", "inspector_cfg_a", "inspector_cfg_b")
METRIC_HELP = {
    "recall": "Share of the relevant passages found in the passages returned (recall@k).",
    "precision": "Share of the passages returned that are relevant (precision@k).",
    "mrr": "1 / the rank of the first relevant passage, averaged (MRR@k).",
    "ndcg@10": "Ranking quality of the first 10, 1.0 = every relevant passage on top "
    "(nDCG@10).",
    "hit@1": "Share of questions whose first passage is relevant (hit@1).",
}


@dataclass(frozen=True)
class Controls:
    """The Inspector's settings as they stand on this run: the question and the retrieval
    configuration the controls set, what Chat uses, and Chat's threshold."""

    query: str
    config: ev.EvalConfig
    applied: ev.EvalConfig
    chat_threshold: float
    lab: RetrievalLab

    @property
    def q(self) -> str:
        return self.query.strip()

    @property
    def mode(self) -> str:
        return self.config.mode

    @property
    def threshold(self) -> float:
        return float(self.config.threshold if self.config.threshold is not None
                     else self.chat_threshold)

    @property
    def top_k(self) -> int:
        return self.config.top_k

    @property
    def alpha(self) -> float | None:
        return self.config.alpha

    def label(self, config: ev.EvalConfig | None = None) -> str:
        return config_label(self.lab, self.config if config is None else config)


def config_label(lab: RetrievalLab, config: ev.EvalConfig) -> str:
    """One line saying what a configuration does, every default spelled out."""
    c = lab.resolved(config)
    kw = "" if c.mode != "hybrid" else f" · keyword weight {lab.keyword_weight(c):.2f}"
    if c.reranker != "none":
        kw += f" · rerank: {RERANK_LABELS.get(c.reranker, c.reranker).lower()}"
    size = "" if config.chunk_target is None else \
        f" · passages {c.chunk_target}/{c.chunk_overlap}"
    return (f"{MODE_LABELS.get(c.mode, c.mode)} · threshold {c.threshold:.2f} · {c.top_k} "
            f"returned{kw}{size}")


def load_into_controls(lab: RetrievalLab, config: ev.EvalConfig, note: str = "") -> None:
    """Put ``config`` into the controls (a button's callback: it runs before the widgets are
    drawn again); ``note`` is said once above them."""
    c = lab.resolved(config)
    values = {"inspector_mode": c.mode, "inspector_threshold": float(c.threshold or 0.0),
              "inspector_k": int(c.top_k), "inspector_keyword": lab.keyword_weight(c),
              "inspector_target": int(c.chunk_target or 0),
              "inspector_overlap": int(c.chunk_overlap or 0),
              "inspector_rerank": c.reranker}
    state = st.session_state
    for key, value in values.items():
        state[key] = state[f"_kept_{key}"] = value
    if note:
        state["inspector_loaded"] = note


def apply_later(lab: RetrievalLab, config: ev.EvalConfig, note: str) -> None:
    """A button's callback: load ``config`` into the controls and apply it to Chat on this
    run (Compare's "Apply A / B to Chat")."""
    load_into_controls(lab, config)
    st.session_state["inspector_apply_now"] = note


def keep(key: str, default: Any) -> str:
    """``key`` for a widget whose value survives navigating to another page and back."""
    state = st.session_state
    if key not in state:
        state[key] = state.get(f"_kept_{key}", default)
    return key


def remember() -> None:
    state = st.session_state
    for key in KEPT:
        if key in state:
            state[f"_kept_{key}"] = state[key]


def run_guarded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a lab operation; a MarginaliaError / ValueError becomes a clear message."""
    try:
        return fn(*args, **kwargs)
    except ev.Cancelled:
        st.info("Cancelled; nothing was kept.", icon=":material/cancel:")
    except (MarginaliaError, ValueError) as exc:
        st.error(fmt.escape_inline(getattr(exc, "message", None) or str(exc)),
                 icon=":material/error:")
    return None


def progress_callback(bar: Any) -> Callable[[dict[str, Any]], None]:
    def report(event: dict[str, Any]) -> None:
        total = max(1, int(event.get("total") or 1))
        done = int(event.get("done") or 0)
        what = "Searching" if event.get("stage") == "search" else "Embedding passages"
        extra = f" (passage size {event['target']})" if "target" in event else ""
        bar.progress(min(1.0, done / total), text=f"{what}{extra}: {done} of {total}")
    return report


def metric_row(metrics: dict[str, float], k: int, other: dict[str, float] | None = None) -> None:
    names = [(f"recall@{k}", "Found", "recall"), (f"precision@{k}", "Precision", "precision"),
             (f"mrr@{k}", "First relevant (MRR)", "mrr"),
             ("ndcg@10", "Ranking (nDCG@10)", "ndcg@10"), ("hit@1", "Right on top", "hit@1")]
    cols = st.columns(len(names))
    for col, (key, label, help_key) in zip(cols, names, strict=True):
        value = metrics.get(key, 0.0)
        delta = None if other is None else f"{value - other.get(key, 0.0):+.3f}"
        col.metric(label, f"{value:.3f}", delta=delta, help=METRIC_HELP[help_key])


def pick_set(lab: RetrievalLab) -> str | None:
    """The question set the Evaluate and Compare sections work on (kept across pages)."""
    state = st.session_state
    names = [s.name for s in lab.list_sets()]
    if not names:
        st.info("Make or import a question set first (Question sets).", icon=":material/info:")
        return None
    if state.get("inspector_set") not in names:
        state["inspector_set"] = names[0]
    name = st.selectbox("Question set", names, key="inspector_set")
    remember()
    return name
