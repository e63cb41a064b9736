"""`make demo`: a small attention block with a symbolic sequence length, compiled once on the
reference backend and run at two lengths next to the same computation in NumPy."""

from __future__ import annotations

import numpy as np

import luminal as lm


def build(d: int = 16) -> lm.Graph:
    g = lm.Graph()
    x = g.tensor("x", ("s", d))
    wq, wk, wv = (g.tensor(n, (d, d)).persist() for n in ("wq", "wk", "wv"))
    q, k, v = x @ wq, x @ wk, x @ wv  # (s, d)
    scores = (q @ k.T) * (1.0 / np.sqrt(d))  # (s, s)
    s = x.shape[0]
    causal = g.ones((s, s), lm.bool).tril()  # (s, s): key j visible from query i when j <= i
    scores = lm.where(causal, scores, -1e9)
    (scores.softmax(-1) @ v).output("y")
    return g


def numpy_attention(x, wq, wk, wv):
    q, k, v = x @ wq, x @ wk, x @ wv
    s = q @ k.T / np.sqrt(x.shape[1])
    s = np.where(np.tril(np.ones_like(s, dtype=bool)), s, -1e9)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def main() -> None:
    rng = np.random.default_rng(0)
    d = 16
    w = {n: (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32) for n in ("wq", "wk", "wv")}
    model = build(d).compile("reference")
    first = True
    for s in (5, 12):
        x = rng.standard_normal((s, d)).astype(np.float32)
        y = model.run({"x": x, **w} if first else {"x": x})["y"]
        first = False
        ref = numpy_attention(x, w["wq"], w["wk"], w["wv"])
        print(f"s={s:3d}  luminal y[-1,:4]={np.round(y[-1, :4], 4)}  numpy={np.round(ref[-1, :4], 4)}  "
              f"max|diff|={np.abs(y - ref).max():.2e}")  # fmt: skip
    print(f"compiled once: {model.stats}")


if __name__ == "__main__":
    main()
