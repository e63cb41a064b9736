"""The matmul_backend rewrite: fires on every frontend matmul layout, never on a near miss, and
NumpyMatmul computes what Mul -> SumReduce computes."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.hlir import Mul, SumReduce
from luminal.shape.expr import z
from tests.egraph.util import ops_in, oracle, view_of

RNG = np.random.default_rng(7)


def _arr(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


LAYOUTS = {
    # name: (a shape, b shape, build(a, b)); dims symbolic where a name is given
    "2d": (("m", 5), (5, 4), lambda a, b: a @ b),
    "2d-a-transposed": ((5, "m"), (5, 4), lambda a, b: a.T @ b),
    "2d-b-transposed": (("m", 5), (4, 5), lambda a, b: a @ b.T),
    "2d-both-transposed": ((5, "m"), (4, 5), lambda a, b: a.T @ b.T),
    "batched": ((2, "m", 5), (2, 5, 4), lambda a, b: a @ b),
    "batched-b-broadcast": ((2, "m", 5), (5, 4), lambda a, b: a @ b),
    "batched-a-broadcast": (("m", 5), (3, 5, 4), lambda a, b: a @ b),
    "batched-transposed": ((2, 5, "m"), (2, 4, 5), lambda a, b: a.transpose(-1, -2) @ b.transpose(-1, -2)),
    "two-batch-axes": ((2, 3, "m", 5), (2, 3, 5, 4), lambda a, b: a @ b),
    "three-batch-axes": ((2, 1, 2, "m", 5), (1, 2, 1, 5, 4), lambda a, b: a @ b),
    "matvec": (("m", 5), (5,), lambda a, b: a @ b),
    "vecmat": ((5,), (5, "m"), lambda a, b: a @ b),
    "permuted-batch": ((3, "m", 2, 5), (2, 5, 4), lambda a, b: a.permute(2, 0, 1, 3) @ b.unsqueeze(1)),
}


def _concrete(shape, m=3):
    return tuple(m if isinstance(d, str) else d for d in shape)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_rewrite_fires_and_plan_matches_reference(name):
    sa, sb, f = LAYOUTS[name]
    g = lm.Graph()
    f(g.tensor("a", sa), g.tensor("b", sb)).output("y")
    assert "NumpyMatmul" in ops_in(view_of(g))
    model = g.compile("reference")
    assert model.stats["llir_ops"].get("NumpyMatmul") == 1, model.stats["llir_ops"]
    assert "SumReduce" not in model.stats["llir_ops"]
    for m in (1, 3, 6):
        feed = {"a": _arr(_concrete(sa, m)), "b": _arr(_concrete(sb, m))}
        want = oracle(g, feed, {"m": m})["y"]
        got = model.run(feed)["y"]
        np.testing.assert_allclose(got.reshape(-1), want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("dtype", [lm.f16, lm.bf16, lm.f64, lm.i32, lm.i8])
def test_dtypes_match_reference(dtype):
    g = lm.Graph()
    (g.tensor("a", ("m", 6), dtype) @ g.tensor("b", (6, 3), dtype)).output("y")
    model = g.compile("reference")
    assert model.stats["llir_ops"].get("NumpyMatmul") == 1
    if dtype.is_float:
        feed = {"a": _arr((4, 6)).astype(dtype.np), "b": _arr((6, 3)).astype(dtype.np)}
    else:  # large enough to wrap i8 products and sums
        feed = {
            "a": RNG.integers(-100, 100, (4, 6)).astype(dtype.np),
            "b": RNG.integers(-100, 100, (6, 3)).astype(dtype.np),
        }
    want = oracle(g, feed, {"m": 4})["y"]
    got = model.run(feed)["y"].reshape(-1)
    if dtype.is_float:
        tol = {lm.f16: 4e-3, lm.bf16: 3e-2, lm.f64: 1e-12}[dtype]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, want)


def _hand_built(mul: Mul, red: SumReduce, sa=(4, 5), sb=(5, 4)):
    """A graph with a hand-written Mul -> SumReduce pair over inputs a, b."""
    g = lm.Graph()
    a, b = g.tensor("a", sa), g.tensor("b", sb)
    m = g.node(mul, [a, b], mul.shape)
    g.node(red, [m], red.shape).output("y")
    return g


def _mm(a_strides, b_strides, out_strides=None, iter_stride=z, iters=5, red_shape=(4, 4)):
    shape = (4, 4, 5)
    mul = Mul(tuple(_e(d) for d in shape), tuple(_e(s) for s in a_strides), tuple(_e(s) for s in b_strides))
    red = SumReduce(
        tuple(_e(d) for d in red_shape),
        _e(iters),
        tuple(_e(s) for s in (out_strides or (20 * z, 5 * z))),
        _e(iter_stride),
    )
    return mul, red


def _e(x):
    from luminal.shape.expr import expr

    return expr(x)


@pytest.mark.parametrize("b_strides", [(0, z, 4 * z), (0, 0, 4 * z), (0, z, 0)])
def test_hand_built_true_matmul_fires(b_strides):
    # (0, 0, 4z): b broadcast along n as well is still a matmul (a rank-1 b); so is a stride-0 k
    g = _hand_built(*_mm((5 * z, 0, z), b_strides))
    assert "NumpyMatmul" in ops_in(view_of(g))
    feed = {"a": _arr((4, 5)), "b": _arr((5, 4))}
    np.testing.assert_allclose(g.compile("reference").run(feed)["y"].reshape(-1), oracle(g, feed, {})["y"],
                               rtol=2e-5, atol=2e-6)  # fmt: skip


NEAR_MISSES = {
    "a varies along n": ((5 * z, z, z), (0, z, 4 * z)),
    "b varies along m": ((5 * z, 0, z), (z, z, 4 * z)),
    "a broadcast along m, not n": ((0, 5 * z, z), (0, z, 4 * z)),
    "b broadcast along n, not m": ((5 * z, 0, z), (z, 0, 4 * z)),
}


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_miss_strides_do_not_match(name):
    a_st, b_st = NEAR_MISSES[name]
    g = _hand_built(*_mm(a_st, b_st), sa=(20, 5), sb=(20, 5))
    assert "NumpyMatmul" not in ops_in(view_of(g))


def test_sum_over_a_non_last_axis_does_not_match():
    # reduce over n (the middle axis) of the (m, n, k) product: strides (20z, z), iter stride 5z
    mul, _ = _mm((5 * z, 0, z), (0, z, 4 * z))
    red = SumReduce((_e(4), _e(5)), _e(4), (20 * z, z), 5 * z)
    assert "NumpyMatmul" not in ops_in(view_of(_hand_built(mul, red)))


def test_mismatched_dims_do_not_match():
    # the reduction claims 3 iterations over a k of 5
    mul, red = _mm((5 * z, 0, z), (0, z, 4 * z), iters=3)
    assert "NumpyMatmul" not in ops_in(view_of(_hand_built(mul, red)))
    # the reduction reads a non-contiguous layout of the product
    mul, red = _mm((5 * z, 0, z), (0, z, 4 * z), out_strides=(5 * z, 20 * z))
    assert "NumpyMatmul" not in ops_in(view_of(_hand_built(mul, red)))


def test_elementwise_product_sum_is_not_a_matmul():
    g = lm.Graph()
    a, b = g.tensor("a", ("m", 5)), g.tensor("b", ("m", 5))
    (a * b).sum(-1).output("y")
    assert "NumpyMatmul" not in ops_in(view_of(g))


def test_bool_product_sum_does_not_match():
    mul, red = _mm((5 * z, 0, z), (0, z, 4 * z))
    g = lm.Graph()
    a, b = g.tensor("a", (4, 5), lm.bool), g.tensor("b", (5, 4), lm.bool)
    m = g.node(mul, [a, b], mul.shape)
    g.node(red, [m], red.shape).output("y")
    assert "NumpyMatmul" not in ops_in(view_of(g))
