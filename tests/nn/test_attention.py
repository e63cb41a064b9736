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


# -- paged cache: one pool of slots shared by several sequences ------------------------------------------
SLOTS = 96  # at least 8 sequences of 10 tokens


def _paged_model(window=None):
    from luminal.nn.attention import PagedKV

    g = lm.Graph()
    x = g.tensor("x", ("s", D))
    att = nn.Attention(g, "a", D, H, KV, HD, nn.KVCache("cache.0", KV, SLOTS, HD, paged=True), window=window)
    att(x, None, paged=PagedKV.inputs(g)).output("y")
    return g, g.compile("reference")


def _numpy_paged(x, w, pool_k, pool_v, table, seq, pos, window=None):
    """Per new token i of sequence seq[i] at position pos[i]: attention over the slots table[seq, :pos+1]."""
    q = (x @ w["a.q_proj.weight"].T).reshape(-1, H, HD)
    k_new = (x @ w["a.k_proj.weight"].T).reshape(-1, KV, HD)
    v_new = (x @ w["a.v_proj.weight"].T).reshape(-1, KV, HD)
    pk, pv = pool_k.copy(), pool_v.copy()
    for i in range(len(seq)):
        pk[:, table[seq[i], pos[i]]], pv[:, table[seq[i], pos[i]]] = k_new[i], v_new[i]
    out = np.zeros((len(seq), H, HD))
    for i in range(len(seq)):
        lo = 0 if window is None else max(0, pos[i] - window + 1)
        slots = table[seq[i], lo : pos[i] + 1]
        for h in range(H):
            sc = pk[h // (H // KV), slots] @ q[i, h] / np.sqrt(HD)
            pr = np.exp(sc - sc.max())
            out[i, h] = (pr / pr.sum()) @ pv[h // (H // KV), slots]
    return out.reshape(len(seq), H * HD) @ w["a.o_proj.weight"].T, pk, pv


@pytest.mark.parametrize("window", [None, 4])
def test_paged_batched_decode_of_sequences_of_different_lengths(window):
    g, m = _paged_model(window)
    rng = np.random.default_rng(7)
    w = _weights(g, rng)
    for b in range(1, 9):  # B sequences, one new token each, in one step
        lens = rng.integers(1, 11, b)  # tokens after this step (the new one at position len - 1)
        slots = rng.permutation(SLOTS)[: lens.sum()]  # each sequence's tokens scattered over the pool
        table = np.zeros((b, lens.max()), np.int32)
        table[np.arange(lens.max()) < lens[:, None]] = slots
        pool_k = rng.standard_normal((KV, SLOTS, HD)).astype(np.float32)
        pool_v = rng.standard_normal((KV, SLOTS, HD)).astype(np.float32)
        x = rng.standard_normal((b, D)).astype(np.float32)
        seq, pos = np.arange(b, dtype=np.int32), (lens - 1).astype(np.int32)
        feed = {"x": x, **w, "cache.0.k": pool_k, "cache.0.v": pool_v, "kv.table": table, "kv.seq": seq, "kv.pos": pos}
        out = m.run(feed)
        want, pk, pv = _numpy_paged(x, w, pool_k, pool_v, table, seq, pos, window)
        np.testing.assert_allclose(out["y"], want, rtol=1e-4, atol=1e-5, err_msg=f"B={b}")
        np.testing.assert_array_equal(out["cache.0.k"], pk)  # the new rows in their slots, the rest untouched
        np.testing.assert_array_equal(out["cache.0.v"], pv)


def test_paged_prefill_equals_the_contiguous_cache():
    """One sequence, prefill then decode, in a scattered paged pool: the same outputs as KVCache."""
    g, m = _paged_model()
    g2, m2 = _model()
    rng = np.random.default_rng(8)
    w = _weights(g, rng)
    x = rng.standard_normal((7, D)).astype(np.float32)
    table = rng.permutation(SLOTS)[None, :7].astype(np.int32)
    pool = np.zeros((KV, SLOTS, HD), np.float32)
    zero = np.zeros((KV, CAP, HD), np.float32)
    feed = {"cache.0.k": pool, "cache.0.v": pool, "kv.table": table}
    out = m.run({"x": x[:5], **w, **feed, "kv.seq": np.zeros(5, np.int32), "kv.pos": np.arange(5, dtype=np.int32)})
    ref = m2.run({"x": x[:5], **w, "cache.0.k": zero, "cache.0.v": zero}, dims={"p": 0})
    np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-5, atol=1e-6)
    feed = {"cache.0.k": out["cache.0.k"], "cache.0.v": out["cache.0.v"], "kv.table": table}
    out = m.run({"x": x[5:7], **feed, "kv.seq": np.zeros(2, np.int32), "kv.pos": np.array([5, 6], np.int32)})
    ref = m2.run({"x": x[5:7], "cache.0.k": ref["cache.0.k"], "cache.0.v": ref["cache.0.v"]}, dims={"p": 5})
    np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-5, atol=1e-6)


def test_paged_cache_needs_its_inputs():
    g = lm.Graph()
    att = nn.Attention(g, "a", D, H, KV, HD, nn.KVCache("cache.0", KV, SLOTS, HD, paged=True))
    with pytest.raises(lm.ShapeError, match="PagedKV"):
        att(g.tensor("x", ("s", D)), None)
