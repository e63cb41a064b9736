from __future__ import annotations

import math

import numpy as np
import pytest

import luminal as lm
from luminal import nn


def _silu(x):
    return x / (1 + np.exp(-x))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize(("act", "fn"), [("silu", _silu), ("gelu_pytorch_tanh", _gelu_tanh)])
def test_gated_mlp(act, fn):
    g = lm.Graph()
    x = g.tensor("x", ("s", 6))
    nn.GatedMLP(g, "m", 6, 10, act)(x).output("y")
    rng = np.random.default_rng(0)
    w = {f"m.{n}.weight": rng.standard_normal(s).astype(np.float32) * 0.5
         for n, s in (("gate_proj", (10, 6)), ("up_proj", (10, 6)), ("down_proj", (6, 10)))}  # fmt: skip
    xv = rng.standard_normal((3, 6)).astype(np.float32)
    y = g.compile("reference").run({"x": xv, **w})["y"]
    ref = (fn(xv @ w["m.gate_proj.weight"].T) * (xv @ w["m.up_proj.weight"].T)) @ w["m.down_proj.weight"].T
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_gelu_mlp_with_biases():
    from math import erf

    g = lm.Graph()
    x = g.tensor("x", ("s", 4))
    nn.MLP(g, "m", 4, 8)(x).output("y")
    rng = np.random.default_rng(1)
    w = {"m.fc1.weight": rng.standard_normal((8, 4)), "m.fc1.bias": rng.standard_normal(8),
         "m.fc2.weight": rng.standard_normal((4, 8)), "m.fc2.bias": rng.standard_normal(4)}  # fmt: skip
    w = {k: v.astype(np.float32) for k, v in w.items()}
    xv = rng.standard_normal((2, 4)).astype(np.float32)
    h = xv @ w["m.fc1.weight"].T + w["m.fc1.bias"]
    h = 0.5 * h * (1 + np.vectorize(erf)(h / math.sqrt(2)))
    y = g.compile("reference").run({"x": xv, **w})["y"]
    np.testing.assert_allclose(y, h @ w["m.fc2.weight"].T + w["m.fc2.bias"], rtol=1e-4, atol=1e-5)


def test_unknown_activation():
    with pytest.raises(lm.LuminalError, match="swish2"):
        nn.GatedMLP(lm.Graph(), "m", 4, 4, "swish2")


def test_gated_mlp_bf16_gates_in_f32():
    import ml_dtypes

    bf = ml_dtypes.bfloat16
    g = lm.Graph()
    x = g.tensor("x", ("s", 6), lm.bf16)
    nn.GatedMLP(g, "m", 6, 10, "silu", dtype=lm.bf16)(x).output("y")
    rng = np.random.default_rng(2)
    w = {f"m.{n}.weight": (rng.standard_normal(s) * 0.5).astype(bf)
         for n, s in (("gate_proj", (10, 6)), ("up_proj", (10, 6)), ("down_proj", (6, 10)))}  # fmt: skip
    xv = rng.standard_normal((3, 6)).astype(bf)
    y = g.compile("reference").run({"x": xv, **w})["y"]
    f = {k: v.astype(np.float32) for k, v in w.items()}
    # the reference rounds each matmul output and the gated product to bf16 once: mirror that
    gate = (xv.astype(np.float32) @ f["m.gate_proj.weight"].T).astype(bf).astype(np.float32)
    up = (xv.astype(np.float32) @ f["m.up_proj.weight"].T).astype(bf).astype(np.float32)
    h = (_silu(gate) * up).astype(bf).astype(np.float32)
    ref = h @ f["m.down_proj.weight"].T
    assert y.dtype == bf
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=2**-8, atol=1e-3)
