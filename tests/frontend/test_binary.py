"""Property tests of the binary ops against numpy with broadcasting (size-1 and missing axes on
both sides) and python scalars on either side. Integer `/` and `//` truncate (C), `%` is fmod."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import luminal as lm
from tests.helpers import NUMERIC, Arg, check_op

# a: (m, 1, k) and b: (n, 1) broadcast to (m, n, k): both sides broadcast, b has a missing axis.
A, B = ("m", 1, "k"), ("n", 1)


def tdiv(a, b):
    """C division of int64 arrays (b != 0)."""
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _grid(x, step=0.5):
    return np.round(x / step) * step


def _args(dtype, **b_kw):
    if dtype.is_float:
        return {"a": Arg(A), "b": Arg(B, **b_kw)}
    return {"a": Arg(A, lo=-50, hi=50), "b": Arg(B, lo=-50, hi=50, **b_kw)}


def _scalar(dtype):
    return 2.5 if dtype.is_float else 3


def _arith(op, np_op, int_op=None, **b_kw):
    def build(g, a, b):
        s = _scalar(a.dtype)
        return {"tt": op(a, b), "ts": op(a, s), "st": op(s, a), "bt": op(b, a)}

    def ref_for(dtype):
        f = np_op if dtype.is_float or int_op is None else int_op

        def ref(a, b):
            s = _scalar(dtype)
            return {"tt": f(a, b), "ts": f(a, np.full_like(a, s)), "st": f(np.full_like(a, s), a), "bt": f(b, a)}

        return ref

    return build, ref_for, b_kw


ARITH = {
    "add": _arith(lambda x, y: x + y, np.add),
    "sub": _arith(lambda x, y: x - y, np.subtract),
    "mul": _arith(lambda x, y: x * y, np.multiply),
}


def _merged(table, dtype):
    """All ops of `table` in one graph (one compile per dtype), outputs named op_variant."""

    def build(g, a, b):
        return {f"{n}_{k}": t for n, (bld, _, _) in table.items() for k, t in bld(g, a, b).items()}

    def ref(a, b):
        return {f"{n}_{k}": v for n, (_, ref_for, _) in table.items() for k, v in ref_for(dtype)(a, b).items()}

    return build, ref


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_arith(dtype, data):
    """+ - * with tensors on both sides and python scalars on either side."""
    build, ref = _merged(ARITH, dtype)
    check_op(data, "arith", build, ref, _args(dtype), dtype)


def _prep_nonzero(arrays, env):
    """Divisors away from zero (both operands appear as divisors in the variants)."""
    out = {}
    for k, v in arrays.items():
        if v.dtype.kind in "iu":
            out[k] = np.where(v == 0, 7, v).astype(v.dtype)
        else:
            out[k] = np.where(np.abs(v.astype(np.float32)) < 0.25, 0.75, v).astype(v.dtype)
    return out


def _div_variants(op):
    def build(g, a, b):
        s = _scalar(a.dtype)
        return {"tt": op(a, b), "ts": op(a, s), "st": op(s, a), "bt": op(b, a)}

    return build


def _div_ref(f, dtype):
    def ref(a, b):
        s = np.full_like(a, _scalar(dtype))
        return {"tt": f(a, b), "ts": f(a, s), "st": f(s, a), "bt": f(b, a)}

    return ref


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_truediv(dtype, data):
    f = np.divide if dtype.is_float else tdiv
    check_op(data, "div", _div_variants(lambda x, y: x / y), _div_ref(f, dtype), _args(dtype), dtype,
             prep=_prep_nonzero, tol=2)  # fmt: skip


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_floordiv(dtype, data):
    f = np.floor_divide if dtype.is_float else tdiv
    args = {"a": Arg(A, lo=-20, hi=20), "b": Arg(B, lo=-6, hi=6)}
    check_op(data, "floordiv", _div_variants(lambda x, y: x // y), _div_ref(f, dtype), args, dtype, prep=_prep_nonzero)


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_mod(dtype, data):
    """% is C's remainder: sign of the dividend (np.fmod), for ints and floats."""
    args = {"a": Arg(A, lo=-20, hi=20), "b": Arg(B, lo=-6, hi=6)}
    check_op(data, "mod", _div_variants(lambda x, y: x % y), _div_ref(np.fmod, dtype), args, dtype,
             prep=_prep_nonzero, tol=4)  # fmt: skip


CMP = {
    "lt": (lambda x, y: x < y, np.less),
    "le": (lambda x, y: x <= y, np.less_equal),
    "gt": (lambda x, y: x > y, np.greater),
    "ge": (lambda x, y: x >= y, np.greater_equal),
    "eq": (lambda x, y: x.eq(y), np.equal),
    "ne": (lambda x, y: x.ne(y), np.not_equal),
}


def _prep_grid(arrays, env):
    """Values on a coarse grid so ties (equal elements) are common."""
    return {k: _grid(v.astype(np.float64), 1.0).astype(v.dtype) for k, v in arrays.items()}


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_compare(dtype, data):
    """< <= > >= eq ne (bool results), with ties common."""

    def build(g, a, b):
        return {
            f"{n}_{k}": t
            for n, (op, _) in CMP.items()
            for k, t in (("tt", op(a, b)), ("ts", op(a, 1)), ("bt", op(b, a)))
        }

    def ref(a, b):
        return {
            f"{n}_{k}": v for n, (_, f) in CMP.items() for k, v in (("tt", f(a, b)), ("ts", f(a, 1)), ("bt", f(b, a)))
        }

    args = {"a": Arg(A, lo=-2, hi=2), "b": Arg(B, lo=-2, hi=2)}
    check_op(data, "compare", build, ref, args, dtype, prep=_prep_grid)


@given(data=st.data())
def test_logic(data):
    def build(g, a, b):
        return {"and": a & b, "or": a | b, "not": ~a, "and_s": a & True, "or_s": a | False}

    def ref(a, b):
        return {"and": a & b, "or": a | b, "not": ~a, "and_s": a, "or_s": a}

    check_op(data, "logic", build, ref, {"a": Arg(A), "b": Arg(B)}, lm.bool)


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_maximum_minimum_clip(dtype, data):
    def build(g, a, b):
        return {"max": a.maximum(b), "min": a.minimum(b), "max_s": a.maximum(1), "min_s": a.minimum(1),
                "clip": a.clip(-1, 1), "clip_lo": a.clip(0), "clip_hi": a.clip(None, 0)}  # fmt: skip

    def ref(a, b):
        return {"max": np.maximum(a, b), "min": np.minimum(a, b), "max_s": np.maximum(a, 1),
                "min_s": np.minimum(a, 1), "clip": np.clip(a, -1, 1), "clip_lo": np.maximum(a, 0),
                "clip_hi": np.minimum(a, 0)}  # fmt: skip

    check_op(data, "maxmin", build, ref, {"a": Arg(A, lo=-3, hi=3), "b": Arg(B, lo=-3, hi=3)}, dtype, prep=_prep_grid)


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_pow_scalar(dtype, data):
    exps = (0, 1, 2, 3, 5, -1, -2) if dtype.is_float else (0, 1, 2, 3, 5)
    extra = {"half": 0.5, "p15": 1.5, "m05": -0.5} if dtype.is_float else {}

    def build(g, a):
        out = {f"e{e}": a**e for e in exps}
        out.update({k: a.pow(e) for k, e in extra.items()})
        return out

    def ref(a):
        out = {f"e{e}": np.power(a, e) if e >= 0 else np.power(a.astype(np.float64), e) for e in exps}
        out.update({k: np.power(a, e) for k, e in extra.items()})
        return out

    args = {"a": Arg(A, lo=-3, hi=3, min_abs=0.1)} if dtype.is_float else {"a": Arg(A, lo=-9, hi=9)}
    check_op(data, "pow_scalar", build, ref, args, dtype, tol=4)


@pytest.mark.parametrize("dtype", (lm.f32, lm.bf16), ids=str)
@given(data=st.data())
def test_pow_tensor(dtype, data):
    """Tensor exponents: negative bases work for integer exponents, give NaN otherwise; 0 ** 0 = 1."""

    def prep(arrays, env):
        return {"a": _grid(arrays["a"].astype(np.float64), 0.5).astype(arrays["a"].dtype),
                "b": _grid(arrays["b"].astype(np.float64), 0.5).astype(arrays["b"].dtype)}  # fmt: skip

    check_op(data, "pow_tensor", lambda g, a, b: a**b, np.power, {"a": Arg(A), "b": Arg(B)}, dtype, prep=prep, tol=4)


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@given(data=st.data())
def test_where(dtype, data):
    def build(g, c, a, b):
        return {"tt": lm.where(c, a, b), "ts": lm.where(c, a, 0), "st": lm.where(c, 1, b), "method": a.where(c, b)}

    def ref(c, a, b):
        return {"tt": np.where(c, a, b), "ts": np.where(c, a, 0).astype(a.dtype),
                "st": np.where(c, 1, b).astype(b.dtype), "method": np.where(c, a, b)}  # fmt: skip

    args = {"c": Arg(("n", "k"), dtype=lm.bool), "a": Arg(A), "b": Arg(B)}
    check_op(data, "where", build, ref, args, dtype)


def test_where_does_not_leak_nan():
    """where picks, it does not blend: the unselected NaN / inf do not reach the output."""
    g = lm.Graph()
    c, a, b = g.tensor("c", (4,), lm.bool), g.tensor("a", (4,)), g.tensor("b", (4,))
    lm.where(c, a, b).output("y")
    out = g.compile("reference").run({
        "c": np.array([True, False, True, False]),
        "a": np.array([1, np.nan, np.inf, np.nan], np.float32),
        "b": np.array([np.nan, 2, np.nan, -np.inf], np.float32),
    })["y"]  # fmt: skip
    np.testing.assert_array_equal(out, np.array([1, 2, np.inf, -np.inf], np.float32))


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum_nan_propagate(op):
    """Like numpy: a NaN on either side gives NaN (whatever its sign bit)."""
    g = lm.Graph()
    a, b = g.tensor("a", (4,)), g.tensor("b", (4,))
    getattr(a, op)(b).output("y")
    nan = np.float32(np.nan)
    av = np.array([nan, 1, -nan, 2], np.float32)
    bv = np.array([1, nan, 3, -nan], np.float32)
    out = g.compile("reference").run({"a": av, "b": bv})["y"]
    assert np.isnan(out).all(), out


def test_int_division_by_zero_saturates():
    """numerics.md: int x / 0 and x // 0 saturate (0 / 0 = 0), x % 0 = 0; nothing traps."""
    g = lm.Graph()
    a, b = g.tensor("a", (3,), lm.i32), g.tensor("b", (3,), lm.i32)
    (a / b).output("div")
    (a // b).output("floordiv")
    (a % b).output("mod")
    out = g.compile("reference").run({"a": np.array([5, -5, 0], np.int32), "b": np.zeros(3, np.int32)})
    imax, imin = 2**31 - 1, -(2**31)
    assert out["div"].tolist() == [imax, imin, 0] and out["floordiv"].tolist() == [imax, imin, 0]
    assert out["mod"].tolist() == [0, 0, 0]


def test_compare_nan():
    """Every ordered comparison with NaN is False, ne is True (numpy / IEEE)."""
    g = lm.Graph()
    a, b = g.tensor("a", (4,)), g.tensor("b", (4,))
    for n, (op, _) in CMP.items():
        op(a, b).output(n)
    nan = np.float32(np.nan)
    av = np.array([nan, 1, nan, np.inf], np.float32)
    bv = np.array([1, nan, nan, np.inf], np.float32)
    out = g.compile("reference").run({"a": av, "b": bv})
    for n, (_, f) in CMP.items():
        assert out[n].tolist() == f(av, bv).tolist(), n


def test_int_extremes_wrap():
    """i32 arithmetic wraps (two's complement), abs(INT_MIN) = INT_MIN like numpy."""
    g = lm.Graph()
    a = g.tensor("a", (3,), lm.i32)
    (a + 1).output("inc")
    (a * 2).output("dbl")
    a.abs().output("abs")
    (-a).output("neg")
    v = np.array([2**31 - 1, -(2**31), 5], np.int32)
    out = g.compile("reference").run({"a": v})
    with np.errstate(over="ignore"):
        assert out["inc"].tolist() == (v + np.int32(1)).tolist() and out["dbl"].tolist() == (v * np.int32(2)).tolist()
        assert out["abs"].tolist() == np.abs(v).tolist() and out["neg"].tolist() == (-v).tolist()


@pytest.mark.parametrize("dtype", (lm.i8, lm.u8, lm.i16, lm.i64, lm.f64), ids=str)
@given(data=st.data())
def test_other_dtypes(dtype, data):
    """The remaining numeric dtypes: arithmetic wraps like numpy's fixed-width ints, f64 is f64."""

    def build(g, a, b):
        return {"add": a + b, "sub": a - b, "mul": a * b, "neg": -a, "lt": a < b, "eq": a.eq(b), "max": a.maximum(b),
                "min": a.minimum(b), "sum": (a * b).sum(axis=0), "amax": a.max(axis=-1), "amin": a.min(axis=(0, 1)),
                "mod": a % b, "div": a / b}  # fmt: skip

    def ref(a, b):
        div = np.divide(a, b) if dtype.is_float else tdiv(a, b)
        return {"add": a + b, "sub": a - b, "mul": a * b, "neg": -a, "lt": a < b, "eq": a == b,
                "max": np.maximum(a, b), "min": np.minimum(a, b), "sum": (a * b).sum(axis=0), "amax": a.max(axis=-1),
                "amin": a.min(axis=(0, 1)), "mod": np.fmod(a, b), "div": div}  # fmt: skip

    info = None if dtype.is_float else np.iinfo(dtype.np)
    lo, hi = (-50.0, 50.0) if info is None else (max(info.min, -300), min(info.max, 300))
    check_op(data, "other_dtypes", build, ref, {"a": Arg(A, lo=lo, hi=hi), "b": Arg(B, lo=lo, hi=hi)}, dtype,
             prep=_prep_nonzero)  # fmt: skip


def _prep_zero_divisors(arrays, env):
    """About a third of every operand exactly 0 or -0.0 (each appears as a divisor somewhere)."""
    rng = np.random.default_rng(int(arrays["a"].size * 7 + arrays["b"].size))
    out = {}
    for k, v in arrays.items():
        pick = rng.random(v.shape)
        out[k] = np.where(pick < 0.2, 0.0, np.where(pick < 0.35, -0.0, v)).astype(v.dtype)
    return out


@pytest.mark.parametrize("dtype", (lm.f32, lm.f16, lm.bf16, lm.f64), ids=str)
@given(data=st.data())
def test_floordiv_by_zero(dtype, data):
    """Float // by (signed) zero is numpy's floor_divide: inf, -inf or NaN (a / b), never a NaN for all."""
    args = {"a": Arg(A, lo=-20, hi=20), "b": Arg(B, lo=-6, hi=6)}
    check_op(data, "floordiv0", _div_variants(lambda x, y: x // y), _div_ref(np.floor_divide, dtype), args, dtype,
             prep=_prep_zero_divisors)  # fmt: skip


F64_SCALARS = (1e300, 1e-50, 0.1, -1 / 3, 2.0**-1074, 1.7976931348623157e308)
I64_SCALARS = (2**50 + 2**26 + 1, 2**62 + 3, -(2**63) + 5, 2**53 + 1, -(2**31) - 7)


@given(data=st.data())
def test_scalar_constants_exact_f64_i64(data):
    """Python scalars reach the graph exact in the tensor's dtype: f64 never passes through f32
    (x * 1e300 is not NaN, x * 1e-50 is not 0) and i64 is exact beyond 2^53."""

    def build(g, x, i):
        out = {f"f{k}": x * c for k, c in enumerate(F64_SCALARS)}
        out.update({f"i{k}": i + c for k, c in enumerate(I64_SCALARS)})
        out["isub"] = i - I64_SCALARS[0]
        return out

    def ref(x, i):
        out = {f"f{k}": x * c for k, c in enumerate(F64_SCALARS)}
        out.update({f"i{k}": i + np.int64(c) for k, c in enumerate(I64_SCALARS)})  # wraps like luminal
        out["isub"] = i - np.int64(I64_SCALARS[0])
        return out

    args = {"x": Arg(("n",), dtype=lm.f64, lo=-2, hi=2), "i": Arg(("n",), dtype=lm.i64, lo=-1000, hi=1000)}
    with np.errstate(over="ignore"):
        check_op(data, "const_exact", build, ref, args, lm.f64, tol=0.01)


@pytest.mark.parametrize(
    ("dtype", "value"), [(lm.i32, 2**31), (lm.i32, -(2**31) - 1), (lm.i8, 128), (lm.u8, -1), (lm.i64, 2**63)]
)
def test_scalar_out_of_dtype_range_raises(dtype, value):
    """x_i32 + 2**31 raises (numpy: OverflowError) instead of saturating the constant."""
    x = lm.Graph().tensor("x", (3,), dtype)
    with pytest.raises(lm.DTypeError, match=f"add: constant {value}"):
        _ = x + value


# -- correctly rounded division, exact pow (issue 10 item 5) -------------------------------------------
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.0, 1e-40, 2.0**-1074, 1e300, 2.0**-1000])


def _prep_specials(arrays, env):
    """A few elements of each operand replaced by zeros, infinities, NaN, subnormals, huge values."""
    rng = np.random.default_rng(int(sum(v.size for v in arrays.values())))
    out = {}
    for k, v in arrays.items():
        w = v.astype(np.float64)
        pick = rng.random(v.shape) < 0.3
        with np.errstate(over="ignore"):
            out[k] = np.where(pick, rng.choice(SPECIAL, v.shape), w).astype(v.dtype)
    return out


@pytest.mark.parametrize("dtype", (lm.f32, lm.f16, lm.bf16, lm.f64), ids=str)
@given(data=st.data())
def test_truediv_correctly_rounded(dtype, data):
    """Float `/` is IEEE division: bit-for-bit numpy's in the dtype (specials included), never
    a * (1/b). Operands span many binades so products and quotients exercise every rounding."""

    def build(g, a, b):
        return {"tt": a / b, "ts": a / 0.019607844, "st": 3.0 / b}

    def ref(a, b):
        d = dtype.np
        a, b = a.astype(d), b.astype(d)
        with np.errstate(all="ignore"):
            return {"tt": (a / b).astype(np.float64), "ts": (a / d.type(0.019607844)).astype(np.float64),
                    "st": (d.type(3.0) / b).astype(np.float64)}  # fmt: skip

    def prep(arrays, env):
        rng = np.random.default_rng(int(arrays["a"].size * 31 + arrays["b"].size))
        spread = {k: v.astype(np.float64) * 2.0 ** rng.integers(-60, 60, v.shape) for k, v in arrays.items()}
        with np.errstate(over="ignore"):
            out = _prep_specials({k: v.astype(dtype.np) for k, v in spread.items()}, env)
        if dtype == lm.f64:  # a subnormal f64 quotient may round twice (docs/numerics.md): tested apart
            with np.errstate(all="ignore"):
                q = np.abs(out["a"] / out["b"][None])  # (m, n, k)
            sub = ((q > 0) & (q < 2.0**-1022)).any(axis=1, keepdims=True) | (np.abs(out["a"]) < 2.0**-1016)
            out["a"] = np.where(sub, 1.0, out["a"])
        return out

    check_op(data, "div_cr", build, ref, {"a": Arg(A), "b": Arg(B)}, dtype, prep=prep, tol=0)


@pytest.mark.parametrize("dtype", (lm.f32, lm.f16, lm.bf16, lm.f64), ids=str)
@given(data=st.data())
def test_floordiv_bit_exact(dtype, data):
    """Float `//` is numpy's floor_divide bit for bit (up to the sign of a zero quotient), for
    quotients of every size: |q| >= 2^(p-1) used to round `q + 0.5` to even (f32 8388609 // 1 gave
    8388610), and 16-bit chains rounded after every step (bf16 -276 // -1.71875 gave 162, not
    160: numpy computes 16-bit floor_divide in f32)."""

    def build(g, a, b):
        return {"tt": a // b, "ts": a // 1.0, "st": 3.0 // b, "small": a // 0.75, "third": a // 0.3}

    def ref(a, b):
        d = dtype.np
        a, b = a.astype(d), b.astype(d)
        with np.errstate(all="ignore"):
            out = {"tt": np.floor_divide(a, b), "ts": np.floor_divide(a, d.type(1.0)),
                   "st": np.floor_divide(d.type(3.0), b), "small": np.floor_divide(a, d.type(0.75)),
                   "third": np.floor_divide(a, d.type(0.3))}  # fmt: skip
        return {k: v.astype(np.float64) for k, v in out.items()}

    spread = {lm.f16: 10, lm.bf16: 40, lm.f32: 40, lm.f64: 120}[dtype]

    def prep(arrays, env):
        rng = np.random.default_rng(int(arrays["a"].size * 31 + arrays["b"].size))
        wide = {k: v.astype(np.float64) * 2.0 ** rng.integers(-spread // 4, spread, v.shape) for k, v in arrays.items()}
        wide["b"] = np.where(rng.random(wide["b"].shape) < 0.3, np.round(wide["b"]) + 0.5, wide["b"])
        with np.errstate(over="ignore"):
            return _prep_specials({k: v.astype(dtype.np) for k, v in wide.items()}, env)

    check_op(data, "floordiv_exact", build, ref, {"a": Arg(A, lo=-9, hi=9), "b": Arg(B)}, dtype, prep=prep, tol=0)


def test_floordiv_issue_examples():
    """Quotients at and beyond 2^(p-1), and the 16-bit chains the reference got wrong."""
    cases = {lm.f32: [(8388609.0, 1.0), (-8388611.0, 1.0), (16777215.0, -1.0), (3e38, 0.1), (np.inf, 2.0)],
             lm.f64: [(2.0**52 + 1, 1.0), (-(2.0**52) - 3, 1.0), (1e308, 1e-10)],
             lm.bf16: [(-276.0, -1.71875), (-552.0, -2.21875), (496.0, 2.328125)],
             lm.f16: [(-513.5, 0.72), (579.5, 0.512)]}  # fmt: skip
    for dt, pairs in cases.items():
        g = lm.Graph()
        (g.tensor("a", ("n",), dt) // g.tensor("b", ("n",), dt)).output("q")
        a, b = (np.array([p[k] for p in pairs]).astype(dt.np) for k in (0, 1))
        with np.errstate(all="ignore"):
            want = np.floor_divide(a, b)
        got = g.compile("reference").run({"a": a, "b": b})["q"]
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64), err_msg=str(dt))


@pytest.mark.parametrize("dtype", (lm.f32, lm.f64, lm.f16, lm.bf16), ids=str)
def test_floordiv_zero_quotient_has_numpys_sign(dtype):
    """A zero quotient is copysign(0, a / b) in numpy: -0.0 // 1, 0.0 // -1 and 0.5 // -2... are -0.0."""
    a = np.array([-0.0, 0.0, 0.5, -0.5, 0.0, -0.0, 3.0, -3.0, 0.25, -0.25]).astype(dtype.np)
    b = np.array([1.0, -1.0, 2.0, -2.0, 1.0, -1.0, -7.0, 7.0, -4.0, 4.0]).astype(dtype.np)
    g = lm.Graph()
    x = g.tensor("a", ("n",), dtype)
    (x // g.tensor("b", ("n",), dtype)).output("q")
    (x // 3.0).output("qs")
    got = g.compile("reference").run({"a": a, "b": b})
    want = np.floor_divide(a, b).astype(np.float64)
    np.testing.assert_array_equal(got["q"].astype(np.float64), want)
    np.testing.assert_array_equal(np.signbit(got["q"].astype(np.float64)), np.signbit(want))
    ws = np.floor_divide(a, dtype.np.type(3.0)).astype(np.float64)
    np.testing.assert_array_equal(np.signbit(got["qs"].astype(np.float64)), np.signbit(ws))


def test_truediv_f64_subnormal_quotient_within_one_subnormal_ulp():
    g = lm.Graph()
    a, b = g.tensor("a", ("n",), lm.f64), g.tensor("b", ("n",), lm.f64)
    (a / b).output("q")
    rng = np.random.default_rng(3)
    x, y = rng.uniform(1, 2, 4000) * 2.0 ** rng.integers(-1074, -1000, 4000), rng.uniform(1, 2, 4000) * 64
    q = g.compile("reference").run({"a": x, "b": y})["q"]
    assert np.all(np.abs(q - x / y) <= 2.0**-1074) and np.mean(q == x / y) > 0.99


def test_truediv_issue_example():
    """-2.5 / 0.019607844 in f32 is -127.49999 (IEEE), not -127.5 (= -2.5 * (1 / b))."""
    g = lm.Graph()
    a, b = g.tensor("a", (1,)), g.tensor("b", (1,))
    (a / b).output("q")
    q = g.compile("reference").run({"a": np.array([-2.5], np.float32), "b": np.array([0.019607844], np.float32)})["q"]
    assert q[0] == np.float32(-2.5) / np.float32(0.019607844) and q[0] != -127.5


@pytest.mark.parametrize("dtype", (lm.f64, lm.f32, lm.f16), ids=str)
@given(data=st.data())
def test_pow_tensor_exact_for_exact_results(dtype, data):
    """Integer (and dyadic) bases with integer exponents: numpy's pow is exact when the result is
    a float of the dtype (3.0 ** 6.0 = 729, 10 ** 3 = 1000), so is luminal's."""

    def prep(arrays, env):
        rng = np.random.default_rng(int(arrays["a"].size * 13 + arrays["b"].size))
        base = np.round(arrays["a"].astype(np.float64) * 4) * rng.choice([1.0, 0.5, 0.25], arrays["a"].shape)
        hi = 12 if dtype == lm.f64 else 5
        return {"a": base.astype(dtype.np), "b": rng.integers(0, hi, arrays["b"].shape).astype(dtype.np)}

    def ref(a, b):
        return np.power(a, b).astype(dtype.np)  # exact in f64 (53 bits suffice), then one rounding

    check_op(data, "pow_exact", lambda g, a, b: a**b, ref, {"a": Arg(A), "b": Arg(B)}, dtype, prep=prep, tol=0)


def test_pow_issue_examples():
    g = lm.Graph()
    x, e = g.tensor("x", (1,), lm.f64), g.tensor("e", (1,), lm.f64)
    y, f = g.tensor("y", (1,), lm.f32), g.tensor("f", (1,), lm.f32)
    (x**e).output("p64")
    (y**f).output("p32")
    out = g.compile("reference").run({"x": np.array([3.0]), "e": np.array([6.0]), "y": np.array([10.0], np.float32),
                                      "f": np.array([3.0], np.float32)})  # fmt: skip
    assert out["p64"].tolist() == [729.0] and out["p32"].tolist() == [1000.0]


@pytest.mark.parametrize("dtype", (lm.i32, lm.i64, lm.i8, lm.u8), ids=str)
@given(data=st.data())
def test_pow_int_tensor_exponent(dtype, data):
    """Integer ** integer tensor: numpy's (binary powering, wrapping); negative exponents give the
    truncated 1 / a ** |e| (numpy raises): 1 for a = 1, +-1 for a = -1, else 0."""

    def build(g, a, b):
        return {"p": a**b, "s": a**20}

    def ref2(a, b):
        a64, b64 = np.broadcast_arrays(a, b)
        m = 2**dtype.bits
        p = np.array([pow(int(x), int(y), m) if y >= 0 else (1 if x == 1 else (-1) ** int(-y) if x == -1 else 0)
                      for x, y in zip(a64.ravel(), b64.ravel())], dtype=object).reshape(a64.shape)  # fmt: skip
        s = np.array([pow(int(x), 20, m) for x in a.ravel()], dtype=object).reshape(a.shape)
        wrap = lambda v: np.array([int(t) for t in v.ravel()], np.uint64).astype(dtype.np).reshape(v.shape)  # noqa: E731
        return {"p": wrap(p % m), "s": wrap(s % m)}

    lo = 0 if dtype == lm.u8 else -9
    e_lo = 0 if dtype == lm.u8 else -3
    args = {"a": Arg(A, lo=lo, hi=9), "b": Arg(B, lo=e_lo, hi=dtype.bits + 3)}
    check_op(data, "pow_int", build, ref2, args, dtype)
