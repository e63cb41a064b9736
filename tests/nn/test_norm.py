from __future__ import annotations

import numpy as np

import luminal as lm
from luminal import nn


def _run(block_fn, x, w):
    g = lm.Graph()
    t = g.tensor("x", ("s", x.shape[1]), x.dtype)
    block_fn(g)(t).output("y")
    return g.compile("reference").run({"x": x, **w})["y"]


def test_rms_norm_plain_and_gemma_offset():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    base = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    y = _run(lambda g: nn.RMSNorm(g, "n", 8, 1e-6), x, {"n.weight": w})
    np.testing.assert_allclose(y, base * w, rtol=1e-5, atol=1e-6)
    y = _run(lambda g: nn.RMSNorm(g, "n", 8, 1e-6, offset=True), x, {"n.weight": w})
    np.testing.assert_allclose(y, base * (1 + w), rtol=1e-5, atol=1e-6)


def test_rms_norm_of_bf16_input_computes_in_f32_and_returns_bf16():
    import ml_dtypes

    x = (np.arange(16, dtype=np.float32).reshape(2, 8) * 300).astype(ml_dtypes.bfloat16)
    y = _run(lambda g: nn.RMSNorm(g, "n", 8, 1e-6), x, {"n.weight": np.ones(8, np.float32)})
    xf = x.astype(np.float32)
    ref = (xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + 1e-6)).astype(ml_dtypes.bfloat16)
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), ref.astype(np.float32))


def test_layer_norm_affine():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6)).astype(np.float32) * 3 + 1
    w, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    y = _run(lambda g: nn.LayerNorm(g, "n", 6), x, {"n.weight": w, "n.bias": b})
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_rms_norm_bf16_weight_scales_in_f32_and_rounds_once():
    import ml_dtypes

    bf = ml_dtypes.bfloat16
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 8)).astype(bf)
    w = (rng.standard_normal(8) * 0.3).astype(bf)
    for offset in (False, True):
        y = _run(lambda g, o=offset: nn.RMSNorm(g, "n", 8, 1e-6, offset=o, dtype=lm.bf16), x, {"n.weight": w})
        xf, wf = x.astype(np.float32), w.astype(np.float32)
        ref = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + 1e-6) * (1 + wf if offset else wf)
        assert y.dtype == bf
        # one rounding of the f32 result: within bf16's unit roundoff (2^-8 relative), f32 noise aside
        np.testing.assert_allclose(y.astype(np.float32), ref, rtol=2**-8 + 1e-5, atol=1e-6)


def test_layer_norm_f16_affine_in_f32():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 6)) * 3 + 1).astype(np.float16)
    w, b = rng.standard_normal(6).astype(np.float16), rng.standard_normal(6).astype(np.float16)
    y = _run(lambda g: nn.LayerNorm(g, "n", 6, dtype=lm.f16), x, {"n.weight": w, "n.bias": b})
    xf = x.astype(np.float64)
    ref = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-5) * w + b
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2**-11 + 1e-5, atol=2e-5)
