"""Issue 22 study: does a non-linear ranker (a one-hidden-layer MLP, listwise softmax loss, in
numpy) lead with the answer more often than the selector's linear listwise model, on the same
cached feature rows (benchmarks/.cache/selector_rows-*.npz, made by train_answer_selector.py)?

    PYTHONPATH=. python benchmarks/train_answer_selector.py   # collect the rows (about 10 min)
    PYTHONPATH=. python benchmarks/selector_mlp_study.py

Prints the lead rate (the top-ranked sentence holds a gold answer) on the fit and tune
articles' answerable questions with a non-empty pool. Recorded in benchmarks/README.md (issue 22).
"""

from __future__ import annotations

import sys

import numpy as np

sys.path.insert(0, "benchmarks")
sys.path.insert(0, ".")
import train_answer_selector as T  # noqa: E402

SHAPES = ((8, 1e-2), (16, 1e-2), (32, 1e-2), (16, 1e-3))  # (hidden units, L2)
STEPS, LR, SEED = 400, 0.01, 0


def load() -> dict[str, np.ndarray]:
    data: dict[str, list] = {k: [] for k in ("x", "y", "q", "answerable", "part")}
    for part, group in T.groups():
        z = np.load(T.group_file(part, group))
        offset = (max(data["q"]) + 1) if data["q"] else 0
        for k in data:
            data[k] += list(z[k] + offset) if k == "q" else list(z[k])
    return {k: np.asarray(v) for k, v in data.items()}


def lead_rate(scores: np.ndarray, y: np.ndarray, q: np.ndarray, mask: np.ndarray) -> float:
    hits = [y[rows[np.argmax(scores[rows])]] > 0
            for rows in (np.where(mask & (q == i))[0] for i in np.unique(q[mask]))]
    return round(float(np.mean(hits)), 4)


def train_mlp(z: np.ndarray, y: np.ndarray, groups: list[np.ndarray], linear: np.ndarray,
              hidden: int, l2: float) -> list[np.ndarray]:
    """Scores ``tanh(z W1 + b1) w2 + z wl`` (the linear model's weights as a start), Adam."""
    rng = np.random.default_rng(SEED)
    params = [rng.normal(0, 0.3, (z.shape[1], hidden)), np.zeros(hidden),
              rng.normal(0, 0.3, hidden), linear.copy()]
    m1 = [np.zeros_like(p) for p in params]
    m2 = [np.zeros_like(p) for p in params]
    for it in range(1, STEPS + 1):
        w1, b1, w2, wl = params
        grads = [np.zeros_like(p) for p in params]
        for g in groups:
            x = z[g]
            h = np.tanh(x @ w1 + b1)
            s = h @ w2 + x @ wl
            e = np.exp(s - s.max())
            p = e / e.sum()
            pos = y[g] > 0
            target = np.zeros_like(p)
            target[pos] = p[pos] / p[pos].sum()
            ds = p - target
            dh = np.outer(ds, w2) * (1 - h * h)
            grads[0] += x.T @ dh
            grads[1] += dh.sum(0)
            grads[2] += h.T @ ds
            grads[3] += x.T @ ds
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            g = g / len(groups) + l2 * p
            m1[i] = 0.9 * m1[i] + 0.1 * g
            m2[i] = 0.999 * m2[i] + 0.001 * g * g
            p -= LR * (m1[i] / (1 - 0.9**it)) / (np.sqrt(m2[i] / (1 - 0.999**it)) + 1e-8)
    return params


def main() -> None:
    d = load()
    x, y, q = d["x"], d["y"].astype(float), d["q"]
    answerable, part = d["answerable"].astype(bool), d["part"]
    real = ~np.isnan(x).any(axis=1)
    fit, tune = real & (part == "fit") & answerable, real & (part == "tune") & answerable
    mean = x[real & (part == "fit")].mean(0)
    scale = x[real & (part == "fit")].std(0)
    scale[scale < 1e-9] = 1.0
    z = (np.nan_to_num(x) - mean) / scale
    linear = T.fit_listwise(z[fit], y[fit], q[fit])
    print("linear listwise: tune", lead_rate(z @ linear, y, q, tune),
          "fit", lead_rate(z @ linear, y, q, fit))
    groups = [g for g in (np.where(fit & (q == i))[0] for i in np.unique(q[fit])) if y[g].any()]
    for hidden, l2 in SHAPES:
        w1, b1, w2, wl = train_mlp(z, y, groups, linear, hidden, l2)
        s = np.tanh(z @ w1 + b1) @ w2 + z @ wl
        print(f"MLP {hidden} units, L2 {l2}: tune", lead_rate(s, y, q, tune),
              "fit", lead_rate(s, y, q, fit))


if __name__ == "__main__":
    main()
