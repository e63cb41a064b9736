"""Exact reference semantics of every HLIR primitive (docs/numerics.md): integer wrapping, truncating
Mod, int x % 0 = 0, casts (saturation, NaN -> 0, round-to-nearest-even to 16/8-bit floats), NaN in
LessThan and MaxReduce (total order), empty reductions, Gather range checks, Scatter drops and order."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.errors import BackendError, DTypeError
from luminal.hlir import (
    HLIR_OPS,
    PRIMITIVES,
    Add,
    Cast,
    Constant,
    Exp2,
    Gather,
    Iota,
    LessThan,
    Log2,
    MaxReduce,
    Mod,
    Mul,
    Recip,
    Scatter,
    Sin,
    Sqrt,
    SumReduce,
)  # fmt: skip
from luminal.shape.expr import ZERO, num, var, z
from luminal.shape.tracker import contiguous_strides

NAN = np.float32(np.nan)


def dims(*ds):
    return tuple(num(d) if isinstance(d, int) else d for d in ds)


def cs(*ds):
    return contiguous_strides(dims(*ds))


def arr(values, dt):
    return np.asarray(values, dtype=dt.np).reshape(-1)


def binary(cls, a, b, dt, env=None):
    a, b = arr(a, dt), arr(b, dt)
    return cls(dims(a.size), cs(a.size), cs(a.size)).reference([a, b], (dt, dt), env or {})


# -- the op set ----------------------------------------------------------------------------------
def test_fifteen_primitives():
    names = {op.__name__ for op in PRIMITIVES}
    assert names == {"Log2", "Exp2", "Sin", "Sqrt", "Recip", "Add", "Mul", "Mod", "LessThan", "SumReduce",
                     "MaxReduce", "Iota", "Gather", "Scatter", "Cast"}  # fmt: skip
    assert {op.__name__ for op in HLIR_OPS} - names == {"Input", "Output", "Constant"}


# -- Add / Mul / Mod / LessThan -----------------------------------------------------------------
@pytest.mark.parametrize(("dt", "a", "b", "add", "mul"), [
    (lm.i8, [127, -128, 100], [1, -1, 3], [-128, 127, 103], [127, -128, 44]),
    (lm.u8, [255, 0, 16], [1, 1, 16], [0, 1, 32], [255, 0, 0]),
    (lm.i16, [32767, -32768, 300], [1, -1, 300], [-32768, 32767, 600], [32767, -32768, 24464]),
    (lm.i32, [2**31 - 1, 7], [1, -3], [-(2**31), 4], [2**31 - 1, -21]),
])  # fmt: skip
def test_integer_add_mul_wrap(dt, a, b, add, mul):
    np.testing.assert_array_equal(binary(Add, a, b, dt), arr(add, dt))
    np.testing.assert_array_equal(binary(Mul, a, b, dt), arr(mul, dt))
    assert binary(Add, a, b, dt).dtype == dt.np


def test_bool_add_mul_are_or_and():
    a, b = [True, True, False, False], [True, False, True, False]
    np.testing.assert_array_equal(binary(Add, a, b, lm.bool), [True, True, True, False])
    np.testing.assert_array_equal(binary(Mul, a, b, lm.bool), [True, False, False, False])


@pytest.mark.parametrize("dt", [lm.i8, lm.i16, lm.i32, lm.i64])
def test_int_mod_truncates_and_mod_zero_is_zero(dt):
    a, b = [7, -7, 7, -7, 5, -5, 0], [3, 3, -3, -3, 0, 0, 0]
    np.testing.assert_array_equal(binary(Mod, a, b, dt), arr([1, -1, 1, -1, 0, 0, 0], dt))
    info = np.iinfo(dt.np)
    np.testing.assert_array_equal(binary(Mod, [info.min], [-1], dt), arr([0], dt))  # no overflow trap


@pytest.mark.parametrize("dt", [lm.f32, lm.f16, lm.bf16, lm.f64])
def test_float_mod_is_fmod(dt):
    out = binary(Mod, [7.5, -7.5, 7.5, -7.5, 1.0, np.inf, 3.0], [2, 2, -2, -2, 0, 2, np.inf], dt)
    np.testing.assert_array_equal(out[:4].astype(np.float64), [1.5, -1.5, 1.5, -1.5])
    assert np.isnan(out[4]) and np.isnan(out[5]) and out[6] == 3.0


def test_u8_mod():
    np.testing.assert_array_equal(binary(Mod, [250, 7], [7, 0], lm.u8), arr([5, 0], lm.u8))


def test_less_than_nan_and_bool():
    out = binary(LessThan, [NAN, 1, NAN, -np.inf, 1], [1, NAN, NAN, np.inf, 1], lm.f32)
    assert out.dtype == np.bool_ and out.tolist() == [False, False, False, True, False]
    out = binary(LessThan, [False, False, True, True], [False, True, False, True], lm.bool)
    assert out.tolist() == [False, True, False, False]  # !a & b


def test_binary_reads_strided_views():
    """Broadcast (stride 0) and transposed strides select the right elements."""
    a = np.arange(6, dtype=np.float32)  # viewed (3, 2) transposed from (2, 3)
    b = np.array([10, 20], np.float32)  # broadcast along axis 1 of (2, 3)
    op = Add(dims(2, 3), (z, z * 2), (z, ZERO))
    want = np.arange(6, dtype=np.float32).reshape(3, 2).T + np.array([[10], [20]], np.float32)
    np.testing.assert_array_equal(op.reference([a, b], (lm.f32, lm.f32), {}), want.reshape(-1))


def test_symbolic_shapes_resolve_from_env():
    s = var("s")
    op = Mul((s, num(2)), (z * 2, z), (ZERO, z))
    a, b = np.arange(6, dtype=np.int32), np.array([3, 5], np.int32)
    np.testing.assert_array_equal(op.reference([a, b], (lm.i32, lm.i32), {"s": 3}), (a.reshape(3, 2) * b).reshape(-1))


# -- unary: 16-bit floats compute in f32, round once at the store ---------------------------------
@pytest.mark.parametrize("cls,fn", [(Log2, np.log2), (Exp2, np.exp2), (Sin, np.sin), (Sqrt, np.sqrt),
                                    (Recip, np.reciprocal)])  # fmt: skip
@pytest.mark.parametrize("dt", [lm.f32, lm.f16, lm.bf16, lm.f64])
def test_unary_rounds_once(cls, fn, dt):
    x = np.linspace(0.1, 7.3, 37).astype(dt.np)
    out = cls(dims(37), cs(37)).reference([x], (dt,), {})
    wide = np.float64 if dt == lm.f64 else np.float32
    assert out.dtype == dt.np
    np.testing.assert_array_equal(out, fn(x.astype(wide)).astype(dt.np))


def test_unary_special_values():
    x = np.array([0.0, -0.0, -1.0, np.inf, NAN], np.float32)
    with np.errstate(all="ignore"):
        assert Recip(dims(5), cs(5)).reference([x], (lm.f32,), {}).tolist()[:4] == [np.inf, -np.inf, -1.0, 0.0]
        out = Log2(dims(5), cs(5)).reference([x], (lm.f32,), {})
    assert out[0] == -np.inf and np.isnan(out[2]) and out[3] == np.inf and np.isnan(out[4])


# -- reductions ---------------------------------------------------------------------------------
def reduce(cls, x, dt, n_out, iters):
    x = arr(x, dt)
    return cls(dims(n_out), num(iters), (z * iters,), z).reference([x], (dt,), {})


def test_sum_accumulates_wide_rounds_once():
    # sequential f16 would stick at 2048 (2048 + 1 rounds back); f64 accumulation gives 2050
    np.testing.assert_array_equal(reduce(SumReduce, [2048, 1, 1], lm.f16, 1, 3), arr([2050], lm.f16))
    np.testing.assert_array_equal(reduce(SumReduce, [256, 1, 1], lm.bf16, 1, 3), arr([258], lm.bf16))


def test_sum_integer_wraps_and_bool_refused():
    np.testing.assert_array_equal(reduce(SumReduce, [100, 100, 100], lm.i8, 1, 3), arr([44], lm.i8))
    np.testing.assert_array_equal(reduce(SumReduce, [200, 100], lm.u8, 1, 2), arr([44], lm.u8))
    with pytest.raises(DTypeError, match="bool"):
        reduce(SumReduce, [True, False], lm.bool, 1, 2)


@pytest.mark.parametrize("cls", [SumReduce, MaxReduce])
@pytest.mark.parametrize("dt", [lm.f32, lm.bf16, lm.i32, lm.u8])
def test_empty_reduce_is_zero(cls, dt):
    out = cls(dims(3), num(0), (ZERO,), z).reference([np.zeros(0, dt.np)], (dt,), {})
    assert out.dtype == dt.np and out.tolist() == [0, 0, 0]


def test_max_total_order_on_floats():
    neg_nan = np.float32(-np.nan) if np.signbit(np.float32(-np.nan)) else -NAN
    rows = np.array(
        [[1, NAN, np.inf], [neg_nan, -np.inf, -5], [-0.0, 0.0, -1], [neg_nan, neg_nan, neg_nan]], np.float32
    )
    out = reduce(MaxReduce, rows, lm.f32, 4, 3)
    assert np.isnan(out[0]) and not np.signbit(out[0])  # +NaN beats +inf
    assert out[1] == -5  # -NaN loses to everything
    assert out[2] == 0 and not np.signbit(out[2])  # +0 > -0
    assert np.isnan(out[3])


def test_max_ints_and_bf16():
    np.testing.assert_array_equal(reduce(MaxReduce, [-3, -1, -2, 5, 9, 7], lm.i8, 2, 3), arr([-1, 9], lm.i8))
    np.testing.assert_array_equal(reduce(MaxReduce, [0.5, -2, 3.25], lm.bf16, 1, 3), arr([3.25], lm.bf16))


# -- Iota / Constant / Gather / Scatter -----------------------------------------------------------
def test_iota_and_constant():
    s = var("s")
    out = Iota(z * 3 + s, s * 2).reference([], (), {"s": 2})
    assert out.dtype == np.int32 and out.tolist() == [2, 5, 8, 11]
    c = Constant.of(0.1, lm.f32).reference([], (), {})
    assert c.dtype == np.float32 and c.tolist() == [np.float32(0.1)]


@pytest.mark.parametrize(
    ("value", "dt"),
    [(1e300, lm.f64), (1e-50, lm.f64), (0.1, lm.f64), (0.1, lm.f16), (1 / 3, lm.bf16), (-0.0, lm.f32),
     (2**62 + 1, lm.i64), (-(2**63), lm.i64), (2**50 + 2**26 + 1, lm.i64), (-128, lm.i8), (255, lm.u8),
     (2**31 - 1, lm.i32), (True, lm.bool), (2**60 + 1, lm.f32), (1e39, lm.f32), (70000, lm.f16)],
)  # fmt: skip
def test_constant_exact_in_its_dtype(value, dt):
    """A Constant holds the value rounded once to its dtype (ints exactly, beyond 2^53 too), like numpy."""
    c = Constant.of(value, dt)
    out = c.reference([], (), {})
    with np.errstate(over="ignore"):
        want = np.array([value]).astype(dt.np) if dt.is_float else np.array([value], dt.np)
    assert out.dtype == dt.np and out.tobytes() == want.tobytes()


BAD_CONSTANTS = [(2**31, lm.i32), (-(2**31) - 1, lm.i32), (256, lm.u8), (-1, lm.u8), (2**63, lm.i64), (2, lm.bool),
                 (1.5, lm.i32), (10**400, lm.f64)]  # fmt: skip


@pytest.mark.parametrize(("value", "dt"), BAD_CONSTANTS)
def test_constant_out_of_range_raises(value, dt):
    with pytest.raises(DTypeError):
        Constant.of(value, dt)


def test_gather_reads_flat_logical_index_of_data_view():
    data = np.arange(6, dtype=np.float32)  # viewed transposed: (3, 2) of a (2, 3) buffer
    idx = np.array([0, 1, 5, 2], np.int32)
    op = Gather(dims(4), cs(4), dims(3, 2), (z, z * 3))
    np.testing.assert_array_equal(
        op.reference([idx, data], (lm.i32, lm.f32), {}), data.reshape(2, 3).T.reshape(-1)[idx]
    )


@pytest.mark.parametrize("bad", [6, -1])
def test_gather_out_of_range_raises(bad):
    op = Gather(dims(2), cs(2), dims(6), cs(6))
    with pytest.raises(BackendError, match=f"index {bad} out of range"):
        op.reference([np.array([0, bad], np.int32), np.zeros(6, np.float32)], (lm.i32, lm.f32), {})


def test_scatter_last_write_wins_and_drops_out_of_range():
    dest = np.array([1, 2, 3, 4], np.float32)
    idx = np.array([2, 0, 2, 9, -1, 4, 0], np.int32)
    src = np.array([10, 20, 30, 40, 50, 60, 70], np.float32)
    op = Scatter(dims(4), cs(4), dims(7), cs(7), cs(7))
    out = op.reference([dest, idx, src], (lm.f32, lm.i32, lm.f32), {})
    np.testing.assert_array_equal(out, [70, 2, 30, 4])
    assert dest.tolist() == [1, 2, 3, 4]  # inputs are not modified


def test_scatter_dest_view_and_broadcast_src():
    dest = np.array([5, 6], np.int32)  # broadcast to (2, 2) then made contiguous
    op = Scatter(dims(2, 2), (ZERO, z), dims(2), cs(2), (ZERO,))
    out = op.reference([dest, np.array([3, 0], np.int32), np.array([9], np.int32)], (lm.i32, lm.i32, lm.i32), {})
    np.testing.assert_array_equal(out, [9, 6, 5, 9])


# -- Cast ---------------------------------------------------------------------------------------
def cast(values, src, dst):
    x = arr(values, src)
    with np.errstate(all="ignore"):
        return Cast(dims(x.size), cs(x.size), dst).reference([x], (src,), {})


@pytest.mark.parametrize("dst", [lm.i8, lm.u8, lm.i16, lm.i32, lm.i64])
def test_float_to_int_truncates_saturates_nan_zero(dst):
    info = np.iinfo(dst.np)
    out = cast([2.9, -2.9, NAN, np.inf, -np.inf, 1e30, -1e30, -0.5], lm.f32, dst)
    assert out.dtype == dst.np
    lo = 0 if dst == lm.u8 else -2
    assert out.tolist() == [2, lo, 0, info.max, info.min, info.max, info.min, 0]


def test_f64_to_i64_edges():
    out = cast([2.0**63, -(2.0**63), 2.0**62, -1.5], lm.f64, lm.i64)
    assert out.tolist() == [2**63 - 1, -(2**63), 2**62, -1]


@pytest.mark.parametrize(("src", "dst", "x", "want"), [
    (lm.i32, lm.i8, [200, -129, 256, 127], [-56, 127, 0, 127]),
    (lm.i32, lm.u8, [-1, 256, 300], [255, 0, 44]),
    (lm.u8, lm.i8, [200, 127], [-56, 127]),
    (lm.i64, lm.i32, [2**32 + 5, -(2**31) - 1], [5, 2**31 - 1]),
    (lm.i16, lm.u8, [-2, 511], [254, 255]),
])  # fmt: skip
def test_int_to_int_wraps(src, dst, x, want):
    assert cast(x, src, dst).tolist() == want


def test_bool_casts():
    assert cast([0, 2, -1], lm.i32, lm.bool).tolist() == [False, True, True]
    assert cast([0.0, -0.0, NAN, 0.1], lm.f32, lm.bool).tolist() == [False, False, True, True]
    assert cast([True, False], lm.bool, lm.f32).tolist() == [1.0, 0.0]
    assert cast([True, False], lm.bool, lm.i8).tolist() == [1, 0]


def test_round_to_nearest_even_16_bit():
    # bf16: 7 mantissa bits. 1 + 2^-8 is a tie -> even (1.0); 1 + 3 * 2^-8 is a tie -> 1 + 2^-6
    bf = cast([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20], lm.f32, lm.bf16).astype(np.float64)
    assert bf.tolist() == [1.0, 1 + 2**-6, 1 + 2**-7]
    f16 = cast([1 + 2**-11, 1 + 3 * 2**-11, 70000.0, 65519.0], lm.f32, lm.f16).astype(np.float64)
    assert f16.tolist() == [1.0, 1 + 2**-9, np.inf, 65504.0]


def test_fp8_through_ml_dtypes():
    x = [0.3, -1.7, 448.0, 2.0**-9, 1000.0]
    for dst, mt in [(lm.f8e4m3, ml_dtypes.float8_e4m3fn), (lm.f8e5m2, ml_dtypes.float8_e5m2)]:
        out = cast(x, lm.f32, dst)
        want = np.asarray(x, np.float32).astype(mt)
        assert out.dtype == mt
        np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
        back = Cast(dims(5), cs(5), lm.f32).reference([out], (dst,), {})
        np.testing.assert_array_equal(back, want.astype(np.float32))


def test_cast_reads_strided_view():
    x = np.array([1.5, -2.5, 3.5], np.float32)
    out = Cast(dims(2, 3), (ZERO, z), lm.i32).reference([x], (lm.f32,), {})
    assert out.tolist() == [1, -2, 3, 1, -2, 3]
