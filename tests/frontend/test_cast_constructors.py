"""Property tests of cast/astype (exact: docs/numerics.md conversion rules, written out here
independently) and of the graph constructors arange / full / zeros / ones / constant."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import luminal as lm
from tests.helpers import Arg, check_op

SRC = (lm.f32, lm.f16, lm.bf16, lm.f64, lm.i32, lm.i8, lm.u8, lm.bool)
DST = (lm.f32, lm.f16, lm.bf16, lm.f64, lm.i64, lm.i32, lm.i16, lm.i8, lm.u8, lm.bool, lm.f8e4m3, lm.f8e5m2)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.5, -0.5, 2.5, -2.5, 1e10, -1e10, 127.9, 128.0, -128.5, 255.5, 256.0,
                    -1.0, 65504.0, 70000.0, 3e38, 2.0**31, -(2.0**31) - 1e3, 1.00390625])  # fmt: skip


def cast_ref(x: np.ndarray, src: lm.DType, dst: lm.DType) -> np.ndarray:
    """numerics.md: -> bool is != 0; float -> int truncates, saturates, NaN -> 0; int -> int wraps;
    -> float rounds to nearest even (ml_dtypes for bf16 / fp8)."""
    if dst == lm.bool:
        return x != 0
    if dst.is_int:
        if src.is_float:
            info = np.iinfo(dst.np)
            t = np.trunc(np.where(np.isnan(x), 0, x))
            inside = np.clip(t, -(2.0**62), 2.0**62).astype(np.int64)  # exact where it is kept below
            return np.where(t >= float(info.max), info.max, np.where(t <= float(info.min), info.min, inside))
        return x.astype(np.int64).astype(dst.np)
    return x.astype(dst.np).astype(np.float64)


def _prep_special(src):
    def prep(arrays, env):
        x = arrays["x"]
        if src.is_float:  # mix in the special values (rounded to the source dtype)
            flat = x.reshape(-1).copy()
            pick = np.arange(flat.size) % 3 == 0
            with np.errstate(over="ignore"):  # 1e10 and 3e38 overflow f16 to inf: wanted
                flat[pick] = SPECIAL[np.arange(flat.size)[pick] % len(SPECIAL)].astype(src.np)
            x = flat.reshape(x.shape)
        return {"x": x}

    return prep


@pytest.mark.parametrize("src", SRC, ids=str)
@given(data=st.data())
def test_cast(src, data):
    def build(g, x):
        out = {d.value: x.cast(d) for d in DST}
        out["astype_t"] = x.T.astype(lm.f32)
        return out

    def ref(x):
        out = {d.value: cast_ref(x, src, d) for d in DST}
        out["astype_t"] = cast_ref(x.T, src, lm.f32)
        return out

    if src.is_float:
        arg = Arg(("a", "b"), lo=-300, hi=300)
    elif src == lm.bool:
        arg = Arg(("a", "b"))
    else:
        info = np.iinfo(src.np)
        arg = Arg(("a", "b"), lo=max(info.min, -70000), hi=min(info.max, 70000))
    outs = {d.value: d for d in DST} | {"astype_t": lm.f32}
    check_op(data, "cast", build, ref, {"x": arg}, src, tol=0, out_dtypes=outs, prep=_prep_special(src),
             dim_sizes=st.integers(1, 6))  # fmt: skip


def test_cast_keeps_broadcast_views():
    """A cast of a broadcast view converts the small buffer only, and reads back right."""
    g = lm.Graph()
    x = g.tensor("x", (3,))
    y = x.expand(4, 3).cast(lm.i32)
    assert y.view.strides[0] == 0
    y.output("y")
    out = g.compile("reference").run({"x": np.array([1.5, -2.7, 9.9], np.float32)})["y"]
    np.testing.assert_array_equal(out, np.broadcast_to(np.array([1, -2, 9], np.int32), (4, 3)))


@given(data=st.data())
def test_constructors(data):
    def build(g):
        return {"ar": g.arange("n"), "ar5": g.arange(5), "full": g.full(("n", 3), 2.5),
                "full_i": g.full("n", 7, lm.i32), "zeros": g.zeros(("n",)), "ones": g.ones((2, "n"), lm.bf16),
                "const": g.constant(3.5), "const_i": g.constant(-2, lm.i32), "const_b": g.constant(True, lm.bool),
                "f64": g.full((2,), 0.1, lm.f64),
                "big_i": g.full((1,), 3_000_000_000, lm.i64), "ar_math": g.arange("n") * 2 - 1,
                "ar_f": g.arange("n").cast(lm.f32) / 4}  # fmt: skip

    def ref(dims):
        n = dims["n"]
        return {"ar": np.arange(n), "ar5": np.arange(5), "full": np.full((n, 3), 2.5), "full_i": np.full(n, 7),
                "zeros": np.zeros(n), "ones": np.ones((2, n)), "const": np.asarray(3.5), "const_i": np.asarray(-2),
                "const_b": np.asarray(True), "f64": np.full(2, 0.1), "big_i": np.full(1, 3_000_000_000),
                "ar_math": np.arange(n) * 2 - 1, "ar_f": np.arange(n) / 4}  # fmt: skip

    outs = {"ar": lm.i32, "ar5": lm.i32, "full": lm.f32, "full_i": lm.i32, "zeros": lm.f32, "ones": lm.bf16,
            "const": lm.f32, "const_i": lm.i32, "const_b": lm.bool, "f64": lm.f64, "big_i": lm.i64, "ar_math": lm.i32,
            "ar_f": lm.f32}  # fmt: skip
    check_op(data, "constructors", build, ref, {}, lm.f32, extra_dims=("n",), out_dtypes=outs,
             dim_sizes=st.integers(0, 9))  # fmt: skip


def test_constant_shape_and_dtype():
    g = lm.Graph()
    c = g.constant(1.25, "f16")
    assert c.shape == () and c.dtype == lm.f16
    f = g.full(("s", 2), 1, np.int32)
    assert f.dtype == lm.i32 and [str(d) for d in f.shape] == ["s", "2"]
    a = g.arange("s")
    assert a.dtype == lm.i32 and a.ndim == 1
