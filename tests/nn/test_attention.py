from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal import nn
from luminal.shape.expr import ZERO, dim

D, H, KV, HD, CAP = 24, 4, 2, 6, 16


def _model(window=None, cache=True, bias=(False,) * 4):
    g = lm.Graph()
    x = g.tensor("x", ("s", D))
    p = dim("p")
    c = nn.KVCache("cache.0", KV, CAP, HD) if cache else None
    nn.Attention(g, "a", D, H, KV, HD, c, bias=bias, window=window)(x, None, p if cache else ZERO).output("y")
    return g, g.compile("reference")


def _weights(g, rng):
    w = {}
    for n in g.persistent:
        if not n.startswith("cache"):
            w[n] = (rng.standard_normal(tuple(int(d.evaluate({})) for d in g.input_shapes[n])) * 0.4).astype(np.float32)
    return w


def _numpy_attention(x, w, window=None):
    s = x.shape[0]
    q = (x @ w["a.q_proj.weight"].T).reshape(s, H, HD)
    k = np.repeat((x @ w["a.k_proj.weight"].T).reshape(s, KV, HD), H // KV, axis=1)
    v = np.repeat((x @ w["a.v_proj.weight"].T).reshape(s, KV, HD), H // KV, axis=1)
    sc = np.einsum("shd,thd->hst", q, k) / np.sqrt(HD)
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    ok = (j <= i) & ((j > i - window) if window else True)
    sc = np.where(ok, sc, -np.inf)
    pr = np.exp(sc - sc.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    return np.einsum("hst,thd->shd", pr, v).reshape(s, H * HD) @ w["a.o_proj.weight"].T


@pytest.mark.parametrize("window", [None, 3])
def test_gqa_attention_matches_numpy(window):
    g, m = _model(window)
    rng = np.random.default_rng(1)
    w = _weights(g, rng)
    x = rng.standard_normal((9, D)).astype(np.float32)
    zero = np.zeros((KV, CAP, HD), np.float32)
    y = m.run({"x": x, **w, "cache.0.k": zero, "cache.0.v": zero}, dims={"p": 0})["y"]
    np.testing.assert_allclose(y, _numpy_attention(x, w, window), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("window", [None, 3])
def test_cache_decode_equals_full_sequence(window):
    g, m = _model(window)
    rng = np.random.default_rng(2)
    w = _weights(g, rng)
    x = rng.standard_normal((8, D)).astype(np.float32)
    zero = np.zeros((KV, CAP, HD), np.float32)
    full = m.run({"x": x, **w, "cache.0.k": zero, "cache.0.v": zero}, dims={"p": 0})["y"]
    out = m.run({"x": x[:3], "cache.0.k": zero, "cache.0.v": zero}, dims={"p": 0})
    ys = [out["y"]]
    for t in range(3, 8):
        out = m.run({"x": x[t : t + 1], "cache.0.k": out["cache.0.k"], "cache.0.v": out["cache.0.v"]}, dims={"p": t})
        ys.append(out["y"])
    np.testing.assert_allclose(np.concatenate(ys), full, rtol=1e-5, atol=1e-5)
    # the cache holds the 8 rows written so far and zeros after them
    assert np.all(out["cache.0.k"][:, 8:] == 0) and np.all(np.abs(out["cache.0.k"][:, :8]).sum(-1) > 0)


def test_causal_mask_values():
    g = lm.Graph()
    nn.causal_mask(g, dim("s"), dim("p"), dim("p") + dim("s"), window=2).output("m")
    g.tensor("x", ("s",))
    m = g.compile("reference").run({"x": np.zeros(2, np.float32)}, dims={"p": 3})["m"]
    assert m.tolist() == [[False, False, True, True, False], [False, False, False, True, True]]


def test_attention_without_cache_and_with_biases():
    g, m = _model(cache=False, bias=(True, False, True, True))
    assert "a.k_proj.bias" not in g.inputs and {"a.q_proj.bias", "a.v_proj.bias", "a.o_proj.bias"} <= set(g.inputs)
    rng = np.random.default_rng(3)
    w = _weights(g, rng)
    x = rng.standard_normal((5, D)).astype(np.float32)
    y = m.run({"x": x, **w})["y"]
    assert np.abs(y - _numpy_attention(x, w)).max() > 1e-3  # the biases matter
    q_b, v_b, o_b = w["a.q_proj.bias"], w["a.v_proj.bias"], w["a.o_proj.bias"]
    s = 5
    q = (x @ w["a.q_proj.weight"].T + q_b).reshape(s, H, HD)
    k = np.repeat((x @ w["a.k_proj.weight"].T).reshape(s, KV, HD), H // KV, axis=1)
    v = np.repeat((x @ w["a.v_proj.weight"].T + v_b).reshape(s, KV, HD), H // KV, axis=1)
    sc = np.where(np.tril(np.ones((s, s), bool)), np.einsum("shd,thd->hst", q, k) / np.sqrt(HD), -np.inf)
    pr = np.exp(sc - sc.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    ref = np.einsum("hst,thd->shd", pr, v).reshape(s, H * HD) @ w["a.o_proj.weight"].T + o_b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
