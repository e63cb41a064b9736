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


# -- out-of-range indices (docs/numerics.md, Indexing) ---------------------------------------------
def _bad_index(rng, n: int, wide: bool) -> int:
    """An index outside [-n, n): just past either end, far out, or (i64) valid modulo 2^32."""
    kinds = [n, n + int(rng.integers(1, 50)), -n - 1, -n - int(rng.integers(1, 50))]
    if wide:
        kinds += [2**32 + int(rng.integers(0, n)), -(2**32) + int(rng.integers(0, n)), 2**62]
    return kinds[int(rng.integers(len(kinds)))]


@pytest.mark.parametrize("idx_dtype", (lm.i32, lm.i64, lm.i8), ids=str)
@pytest.mark.parametrize("op", ("gather", "take_along_axis"))
@given(data=st.data())
def test_out_of_range_index_raises(op, idx_dtype, data):
    """An index outside its axis raises (BackendError naming Gather) even when the flat position it
    would read is inside the buffer (the next row), and an i64 index never wraps to a valid one."""
    from tests.helpers import model_for

    axis = data.draw(st.integers(0, 2), label="axis")
    if op == "gather":
        build = lambda g, x, i: x.gather(i, axis=axis)  # noqa: E731
        ishape = ("i",)
    else:
        build = lambda g, x, i: x.take_along_axis(i, axis)  # noqa: E731
        ishape = tuple("i" if k == axis else "abc"[k] for k in range(3))  # one index per row
    model, _, _ = model_for(("oob", op, axis), build, {"x": Arg(X), "i": Arg(ishape, idx_dtype)}, lm.f32)
    env = {d: data.draw(st.integers(1, 4), label=d) for d in ("a", "b", "c", "i")}
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    n = env["abc"[axis]]
    x = rng.standard_normal([env[d] for d in "abc"]).astype(np.float32)
    ishape_v = [env[s] for s in ishape]
    ivals = rng.integers(-n, n, size=ishape_v)
    bad = _bad_index(rng, n, idx_dtype == lm.i64) if idx_dtype != lm.i8 else [n, -n - 1][int(rng.integers(2))]
    ivals.flat[int(rng.integers(ivals.size))] = bad
    i = ivals.astype(idx_dtype.np)
    with pytest.raises(lm.BackendError, match="Gather: index .* out of range"):
        model.run({"x": x, "i": i})
    ivals = np.where((ivals >= -n) & (ivals < n), ivals, 0)  # all valid now: runs, equals numpy
    i = ivals.astype(idx_dtype.np)
    want = np.take(x, i.astype(np.int64), axis) if op == "gather" else np.take_along_axis(x, i.astype(np.int64), axis)
    np.testing.assert_array_equal(model.run({"x": x, "i": i})["out"], want)


def test_take_along_axis_index_past_row_end_raises():
    """The issue's example: (3, 4) indexed with 4 along the last axis read the next row."""
    g = lm.Graph()
    x, i = g.tensor("x", (3, 4)), g.tensor("i", (3, 1), lm.i32)
    x.take_along_axis(i, 1).output("y")
    m = g.compile("reference")
    with pytest.raises(lm.BackendError, match="out of range"):
        m.run({"x": np.arange(12, dtype=np.float32).reshape(3, 4), "i": np.array([[0], [4], [1]], np.int32)})


def test_scatter_i64_index_beyond_i32_is_dropped_not_wrapped():
    g = lm.Graph()
    x, i, s = g.tensor("x", (4,)), g.tensor("i", (2,), lm.i64), g.tensor("s", (2,))
    x.scatter(i, s).output("y")
    out = g.compile("reference").run(
        {"x": np.zeros(4, np.float32), "i": np.array([2**32 + 1, -1], np.int64), "s": np.array([5, 7], np.float32)}
    )["y"]
    assert out.tolist() == [0, 0, 0, 7]  # 2^32 + 1 is outside [-4, 4): dropped, not written at 1


@pytest.mark.parametrize("bad", [4, -5, 2**32 + 1, -(2**32)])
def test_out_of_range_index_raises_in_the_cuda_plan(bad):
    """The per-axis checks are ordinary elementwise ops ahead of the Gather kernel: the CUDA plan
    (run on the CPU by its kernels' semantics) raises too, also for an i64 index valid modulo 2^32."""
    pytest.importorskip("luminal.backends.cuda.nvrtc")
    from luminal.egraph.compile import CompileOptions, compile_plans
    from tests.backends.cuda.test_lowering import CpuCudaBackend

    g = lm.Graph()
    x, i = g.tensor("x", (3, 4)), g.tensor("i", (3, 1), lm.i64)
    x.take_along_axis(i, 1).output("y")
    x.gather(i.reshape(3), axis=1).output("z")
    ex, _, _ = compile_plans(g, CpuCudaBackend(), CompileOptions(cache=False, search_budget=2))
    xv = np.arange(12, dtype=np.float32).reshape(3, 4)
    good = np.array([[3], [-4], [1]], np.int64)
    out = ex.run({"x": xv, "i": good}, {})
    np.testing.assert_array_equal(np.asarray(out["y"]).reshape(3, 1), np.take_along_axis(xv, good, 1))
    np.testing.assert_array_equal(np.asarray(out["z"]).reshape(3, 3), np.take(xv, good.ravel(), 1))
    with pytest.raises(lm.BackendError, match="out of range"):
        ex.run({"x": xv, "i": np.array([[0], [bad], [1]], np.int64)}, {})
