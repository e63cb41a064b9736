from __future__ import annotations

import numpy as np

import luminal as lm
from luminal import nn


def test_linear_hf_layout_with_bias_and_embedding_tied_head():
    g = lm.Graph()
    ids = g.tensor("ids", ("s",), lm.i32)
    emb = nn.Embedding(g, "e", 10, 4)
    x = emb(ids)  # (s, 4)
    nn.Linear(g, "l", 4, 3, bias=True)(x).output("y")
    emb.attend(x).output("logits")
    rng = np.random.default_rng(0)
    e = rng.standard_normal((10, 4)).astype(np.float32)
    w, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    out = g.compile("reference").run({"ids": np.array([3, 0, 9], np.int32), "e.weight": e, "l.weight": w, "l.bias": b})
    np.testing.assert_allclose(out["y"], e[[3, 0, 9]] @ w.T + b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["logits"], e[[3, 0, 9]] @ e.T, rtol=1e-5, atol=1e-5)


def test_linear_and_embedding_in_bf16_keep_the_dtype():
    import ml_dtypes

    bf = ml_dtypes.bfloat16
    g = lm.Graph()
    ids = g.tensor("ids", ("s",), lm.i32)
    emb = nn.Embedding(g, "e", 10, 4, lm.bf16)
    lin = nn.Linear(g, "l", 4, 3, bias=True, dtype=lm.bf16)
    assert lin.weight.dtype == lin.bias.dtype == emb.weight.dtype == lm.bf16
    lin(emb(ids)).output("y")
    rng = np.random.default_rng(0)
    e, w, b = (rng.standard_normal(s).astype(bf) for s in ((10, 4), (3, 4), (3,)))
    y = g.compile("reference").run({"ids": np.array([3, 0, 9], np.int32), "e.weight": e, "l.weight": w, "l.bias": b})[
        "y"
    ]
    mm = (e.astype(np.float32)[[3, 0, 9]] @ w.astype(np.float32).T).astype(bf).astype(np.float32)
    assert y.dtype == bf
    np.testing.assert_array_equal(y.astype(np.float32), (mm + b.astype(np.float32)).astype(bf).astype(np.float32))
