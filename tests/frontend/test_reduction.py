"""Property tests of reductions and what is built on them (mean, var, argmax, softmax, cumsum, topk,
norms) against numpy: every axis choice and keepdim of an op share one graph, so one compile."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import luminal as lm
from tests.helpers import FLOATS, NUMERIC, Arg, check_op

X = ("a", "b", "c")
AXES = {"all": None, "a0": 0, "a1": 1, "a2": 2, "neg": -1, "a02": (0, 2), "a12": (-2, -1)}
KEEP = ("a0", "neg", "a02", "all")


def _grid(arrays, env):
    """Values on a coarse grid so ties are common (argmax, topk, max)."""
    return {k: np.round(v.astype(np.float64)).astype(v.dtype) for k, v in arrays.items()}


def _variants(method, np_fn, kw=None):
    kw = kw or {}

    def build(g, x):
        out = {n: getattr(x, method)(axis=ax, **kw) for n, ax in AXES.items()}
        out.update({f"{n}_keep": getattr(x, method)(axis=AXES[n], keepdim=True, **kw) for n in KEEP})
        out["perm"] = getattr(x.permute(2, 0, 1), method)(axis=(0, 2), **kw)  # a strided view
        out["bcast"] = getattr(x.unsqueeze(1).expand("a", 2, "b", "c"), method)(axis=1, **kw)  # a stride-0 axis
        return out

    def ref(x):
        out = {n: np_fn(x, axis=ax) for n, ax in AXES.items()}
        out.update({f"{n}_keep": np_fn(x, axis=AXES[n], keepdims=True) for n in KEEP})
        out["perm"] = np_fn(x.transpose(2, 0, 1), axis=(0, 2))
        out["bcast"] = np_fn(np.broadcast_to(x[:, None], (x.shape[0], 2, *x.shape[1:])), axis=1)
        return out

    return build, ref


def _np_prod(x, axis=None, keepdims=False):
    return np.prod(x, axis=axis, keepdims=keepdims)


REDUCE = {  # method -> (numpy, dtypes, Arg kwargs, tolerance scale)
    "sum": (np.sum, NUMERIC, {}, 2),
    "max": (np.max, NUMERIC, {}, 1),
    "min": (np.min, NUMERIC, {}, 1),
    "mean": (np.mean, FLOATS, {}, 2),
    "var": (np.var, FLOATS, {}, 4),
    "std": (np.std, FLOATS, {}, 4),
    "prod": (_np_prod, NUMERIC, {"lo": -1.6, "hi": 1.6}, 4),
}
CASES = [(m, dt) for m, (_, dts, _, _) in REDUCE.items() for dt in dts]


@pytest.mark.parametrize(("method", "dtype"), CASES, ids=[f"{m}-{d}" for m, d in CASES])
@given(data=st.data())
def test_reduce(method, dtype, data):
    np_fn, _, kw, tol = REDUCE[method]
    if not dtype.is_float:
        kw = {"lo": -2, "hi": 2} if method == "prod" else {"lo": -1000, "hi": 1000}
    # integer products stay within i32 (27 elements of |x| <= 2): luminal saturates where numpy wraps
    small = {d: st.integers(1, 3) for d in "abc"} if method == "prod" else None
    build, ref = _variants(method, np_fn)
    check_op(data, method, build, ref, {"x": Arg(X, **kw)}, dtype, tol=tol, dim_sizes=small,
             prep=_grid if method in ("max", "min") else None)  # fmt: skip


@given(data=st.data())
def test_var_std_correction(data):
    def build(g, x):
        return {"var1": x.var(axis=1, correction=1), "std1": x.std(axis=(0, 2), keepdim=True, correction=1)}

    def ref(x):
        return {"var1": np.var(x, axis=1, ddof=1), "std1": np.std(x, axis=(0, 2), keepdims=True, ddof=1)}

    check_op(data, "var_correction", build, ref, {"x": Arg(X)}, lm.f32, tol=4,
             dim_sizes={"a": st.integers(2, 4), "b": st.integers(2, 4), "c": st.integers(1, 3)})  # fmt: skip


def test_reduce_bool():
    """sum of bools counts (i32), max/min of bools are any/all."""
    g = lm.Graph()
    x = g.tensor("x", (3, 4), lm.bool)
    x.sum(axis=1).output("sum")
    x.max(axis=1).output("any")
    x.min(axis=1).output("all")
    v = np.array([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]], bool)
    out = g.compile("reference").run({"x": v})
    assert out["sum"].dtype == np.int32 and out["sum"].tolist() == [3, 0, 4]
    assert out["any"].tolist() == [True, False, True] and out["all"].tolist() == [False, False, True]


@pytest.mark.parametrize("method", ["max", "min"])
def test_max_min_nan_propagates(method):
    """Like numpy: any NaN in the reduced row gives NaN (also the negative NaNs x86 produces)."""
    g = lm.Graph()
    x = g.tensor("x", (3, 3))
    getattr(x, method)(axis=1).output("y")
    nan = np.float32(np.nan)
    v = np.array([[1, nan, 3], [-nan, 2, np.inf], [1, 2, 3]], np.float32)
    out = g.compile("reference").run({"x": v})["y"]
    assert np.isnan(out[:2]).all() and out[2] == (3 if method == "max" else 1), out


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_argmax_argmin(dtype, data):
    """i32 index of the first extreme (ties -> lowest index, like numpy)."""

    def build(g, x):
        return {"amax": x.argmax(), "amax0": x.argmax(axis=0), "amin": x.argmin(axis=1),
                "amin_keep": x.argmin(axis=-1, keepdim=True)}  # fmt: skip

    def ref(x):
        return {"amax": np.argmax(x, -1), "amax0": np.argmax(x, 0), "amin": np.argmin(x, 1),
                "amin_keep": np.argmin(x, -1, keepdims=True)}  # fmt: skip

    outs = {k: lm.i32 for k in ("amax", "amax0", "amin", "amin_keep")}
    check_op(data, "argmax", build, ref, {"x": Arg(X, lo=-2, hi=2)}, dtype, prep=_grid, out_dtypes=outs)


def test_argmax_nan_first():
    g = lm.Graph()
    x = g.tensor("x", (2, 4))
    x.argmax().output("i")
    v = np.array([[1, np.nan, 5, np.nan], [2, 7, 7, 1]], np.float32)
    assert g.compile("reference").run({"x": v})["i"].tolist() == np.argmax(v, -1).tolist()


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@given(data=st.data())
def test_softmax(dtype, data):
    def build(g, x):
        return {"sm": x.softmax(), "sm0": x.softmax(0), "lsm": x.log_softmax(), "lsm1": x.log_softmax(axis=1)}

    def ref(x):
        return {"sm": _softmax(x, -1), "sm0": _softmax(x, 0), "lsm": _log_softmax(x, -1), "lsm1": _log_softmax(x, 1)}

    check_op(data, "softmax", build, ref, {"x": Arg(X, lo=-8, hi=8)}, dtype, tol=2)


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_cumsum(dtype, data):
    def build(g, x):
        return {"last": x.cumsum(), "first": x.cumsum(0), "mid": x.cumsum(axis=1), "t": x.T.cumsum(-1)}

    def ref(x):
        return {"last": np.cumsum(x, -1), "first": np.cumsum(x, 0), "mid": np.cumsum(x, 1), "t": np.cumsum(x.T, -1)}

    kw = {} if dtype.is_float else {"lo": -100, "hi": 100}
    check_op(data, "cumsum", build, ref, {"x": Arg(X, **kw)}, dtype, tol=2)


def _np_topk(x, k, axis):
    x = np.moveaxis(x, axis, -1)
    idx = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    vals = np.take_along_axis(x, idx, -1)
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_topk(dtype, data):
    """Descending values and their indices; ties -> lower index first. The axis size is concrete."""

    def build(g, x):
        v, i = x.topk(3)
        v0, i0 = x.topk(2, axis=1)
        v5, i5 = x.topk(5, axis=-1)
        return {"v": v, "i": i, "v0": v0, "i0": i0, "v5": v5, "i5": i5}

    def ref(x):
        (v, i), (v0, i0), (v5, i5) = _np_topk(x, 3, -1), _np_topk(x, 2, 1), _np_topk(x, 5, -1)
        return {"v": v, "i": i, "v0": v0, "i0": i0, "v5": v5, "i5": i5}

    outs = {"i": lm.i32, "i0": lm.i32, "i5": lm.i32}
    check_op(data, "topk", build, ref, {"x": Arg(("a", 4, 5), lo=-3, hi=3)}, dtype, prep=_grid, out_dtypes=outs)


def _layer_norm(x, axis, eps):
    m = x.mean(axis=axis, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(axis=axis, keepdims=True) + eps)


def _rms_norm(x, axis, eps):
    return x / np.sqrt((x * x).mean(axis=axis, keepdims=True) + eps)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@given(data=st.data())
def test_norms(dtype, data):
    def build(g, x):
        return {"ln": x.layer_norm(), "ln2": x.layer_norm(axis=(-2, -1), eps=1e-3), "rms": x.rms_norm(),
                "rms0": x.rms_norm(axis=0, eps=1e-2)}  # fmt: skip

    def ref(x):
        return {"ln": _layer_norm(x, -1, 1e-5), "ln2": _layer_norm(x, (-2, -1), 1e-3), "rms": _rms_norm(x, -1, 1e-6),
                "rms0": _rms_norm(x, 0, 1e-2)}  # fmt: skip

    check_op(data, "norms", build, ref, {"x": Arg(X)}, dtype, tol=4,
             dim_sizes={"a": st.integers(1, 4), "b": st.integers(1, 4), "c": st.integers(2, 6)})  # fmt: skip


@pytest.mark.parametrize("dtype", (lm.f16, lm.bf16), ids=str)
@given(data=st.data())
def test_16bit_statistics_accumulate_in_f32(dtype, data):
    """mean / var / std of 16-bit floats whose sum (and count) overflow f16: computed in f32, rounded once,
    like numpy (which also uses an f32 accumulator for f16 mean/var)."""

    def build(g, x):
        return {"mean": x.mean(), "mean0": x.mean(axis=0), "var": x.var(), "std": x.std(axis=0)}

    def ref(x):
        return {"mean": x.mean(), "mean0": x.mean(axis=0), "var": x.var(), "std": x.std(axis=0)}

    check_op(data, "stats16", build, ref, {"x": Arg(("n", 2), lo=300, hi=600)}, dtype,
             dim_sizes={"n": st.integers(200, 400)}, tol={"var": 4, "std": 4})  # fmt: skip


def test_f16_mean_of_70000_ones():
    g = lm.Graph()
    g.tensor("x", ("n",), lm.f16).mean().output("m")
    out = g.compile("reference").run({"x": np.ones(70000, np.float16)})["m"]
    assert out.dtype == np.float16 and float(out) == 1.0
