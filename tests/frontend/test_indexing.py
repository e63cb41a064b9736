"""Property tests of the data-dependent ops against numpy: gather (np.take), take_along_axis,
scatter (last write wins, out-of-range dropped), concat, stack, tril/triu."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import luminal as lm
from tests.helpers import Arg, check_op

DTYPES = (lm.f32, lm.bf16, lm.i32)
X = ("a", "b", "c")
I32 = lm.i32


def _wrap(idx, n, negative=True):
    """Valid indices for an axis of n: [-n, n) with negatives (numpy style), else [0, n)."""
    r = np.mod(idx, n)
    return np.where((idx % 2 == 0) & negative, r - n, r).astype(np.int32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_gather(dtype, data):
    def build(g, x, i0, i1, i2):
        return {"ax0": x.gather(i0), "ax1": x.gather(i1, axis=1), "ax_neg": x.gather(i2, axis=-1),
                "t": x.T.gather(i2, axis=0)}  # fmt: skip

    def ref(x, i0, i1, i2):
        return {"ax0": np.take(x, i0, 0), "ax1": np.take(x, i1, 1), "ax_neg": np.take(x, i2, -1),
                "t": np.take(x.T, i2, 0)}  # fmt: skip

    def prep(arr, env):
        return {**arr, "i0": _wrap(arr["i0"], env["a"]), "i1": _wrap(arr["i1"], env["b"]),
                "i2": _wrap(arr["i2"], env["c"])}  # fmt: skip

    args = {
        "x": Arg(X),
        "i0": Arg(("i",), I32, 0, 99),
        "i1": Arg(("i", "j"), I32, 0, 99),
        "i2": Arg(("j",), I32, 0, 99),
    }
    check_op(data, "gather", build, ref, args, dtype, prep=prep)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_take_along_axis(dtype, data):
    def build(g, x, i1, i2):
        return {"ax1": x.take_along_axis(i1, 1), "ax_last": x.take_along_axis(i2, axis=-1)}

    def ref(x, i1, i2):
        return {"ax1": np.take_along_axis(x, i1, 1), "ax_last": np.take_along_axis(x, i2, -1)}

    def prep(arr, env):
        return {**arr, "i1": _wrap(arr["i1"], env["b"]), "i2": _wrap(arr["i2"], env["c"])}

    args = {"x": Arg(X), "i1": Arg(("a", "k", "c"), I32, 0, 99), "i2": Arg((1, "b", "k"), I32, 0, 99)}
    check_op(data, "take_along_axis", build, ref, args, dtype, prep=prep)


def _np_scatter(x, idx, src, axis):
    """Sequential oracle: out[.., idx[j], ..] = src[.., j, ..] in row-major j order; indices in
    [-n, n) (negatives count from the end), others dropped."""
    out = np.array(x, copy=True)
    n = x.shape[axis]
    outer, inner = x.shape[:axis], x.shape[axis + 1 :]
    for j in np.ndindex(*idx.shape):
        v = int(idx[j])
        if not -n <= v < n:
            continue
        for o in np.ndindex(*outer):
            for i in np.ndindex(*inner):
                out[(*o, v % n, *i)] = src[(*o, *j, *i)]
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_scatter(dtype, data):
    def build(g, x, i0, s0, i1, s1):
        return {"ax0": x.scatter(i0, s0), "ax1": x.scatter(i1, s1, axis=1), "scalar": x.scatter(i0, 7, axis=0)}

    def ref(x, i0, s0, i1, s1):
        return {"ax0": _np_scatter(x, i0, s0, 0), "ax1": _np_scatter(x, i1, s1, 1),
                "scalar": _np_scatter(x, i0, np.full((len(i0), *x.shape[1:]), 7, x.dtype), 0)}  # fmt: skip

    def prep(arr, env):  # indices in [-n - 2, n + 2): negatives, duplicates and out-of-range ones
        a, b = env["a"], env["b"]
        return {**arr, "i0": (arr["i0"] % (a + 4) - a - 2).astype(np.int32),
                "i1": (arr["i1"] % (b + 4) - b - 2).astype(np.int32)}  # fmt: skip

    args = {"x": Arg(("a", "b")), "i0": Arg(("i",), I32, 0, 99), "s0": Arg(("i", "b")),
            "i1": Arg(("i", "j"), I32, 0, 99), "s1": Arg(("a", "i", "j"))}  # fmt: skip
    check_op(data, "scatter", build, ref, args, dtype, prep=prep)


def test_scatter_last_write_wins():
    g = lm.Graph()
    x, i, s = g.tensor("x", (4,)), g.tensor("i", (5,), lm.i32), g.tensor("s", (5,))
    x.scatter(i, s).output("y")
    out = g.compile("reference").run({"x": np.zeros(4, np.float32), "i": np.array([1, 1, 9, -1, 1], np.int32),
                                      "s": np.arange(1, 6, dtype=np.float32)})["y"]  # fmt: skip
    np.testing.assert_array_equal(out, np.array([0, 5, 0, 4], np.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data())
def test_concat_stack(dtype, data):
    def build(g, p, q, r):
        return {"c0": lm.concat([p, q], 0), "c1": lm.concat([p, r, p], axis=1), "c_neg": lm.concat([p, r], -1),
                "c_one": lm.concat([q]), "c_t": lm.concat([p.T, r.T]), "s0": lm.stack([p, p * 2]),
                "s1": lm.stack([p, p, p], axis=1), "s_last": lm.stack([p, p], -1)}  # fmt: skip

    def ref(p, q, r):
        return {"c0": np.concatenate([p, q], 0), "c1": np.concatenate([p, r, p], 1),
                "c_neg": np.concatenate([p, r], -1), "c_one": q, "c_t": np.concatenate([p.T, r.T]),
                "s0": np.stack([p, p * 2]),
                "s1": np.stack([p, p, p], 1), "s_last": np.stack([p, p], -1)}  # fmt: skip

    args = {"p": Arg(("m", "k")), "q": Arg(("n", "k")), "r": Arg(("m", 2))}
    check_op(data, "concat", build, ref, args, dtype)


@pytest.mark.parametrize("dtype", (*DTYPES, lm.bool), ids=str)
@given(data=st.data())
def test_tril_triu(dtype, data):
    def build(g, x):
        return {"l": x.tril(), "l1": x.tril(1), "lm1": x.tril(-1), "u": x.triu(), "u2": x.triu(k=2), "um1": x.triu(-1)}

    def ref(x):
        return {"l": np.tril(x), "l1": np.tril(x, 1), "lm1": np.tril(x, -1), "u": np.triu(x), "u2": np.triu(x, 2),
                "um1": np.triu(x, -1)}  # fmt: skip

    check_op(data, "tri", build, ref, {"x": Arg(X)}, dtype)


def test_tril_does_not_leak_nan():
    g = lm.Graph()
    x = g.tensor("x", (2, 2))
    x.tril().output("y")
    out = g.compile("reference").run({"x": np.array([[1, np.nan], [np.inf, 2]], np.float32)})["y"]
    np.testing.assert_array_equal(out, np.array([[1, 0], [np.inf, 2]], np.float32))
