"""Binary ops: arithmetic, comparisons, logic, maximum/minimum, with numpy broadcasting.

HLIR binary ops need two same-shape, same-dtype views: broadcasting is done here with stride-0
expands. Python scalars take the tensor's dtype. Integer `/` and `//` truncate toward zero (C);
float `//` floors (numpy); `%` is the primitive Mod (C remainder for ints, fmod for floats).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from luminal.dtype import DType
from luminal.errors import DTypeError
from luminal.hlir import Add, LessThan, Mod, Mul

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

Scalar = int | float | bool


def _is_scalar(x) -> bool:
    return isinstance(x, (int, float, bool, np.integer, np.floating, np.bool_))


def lift(t: GraphTensor, x, op: str) -> GraphTensor:
    """A Python scalar as a constant of t's dtype; tensors pass through (same graph required)."""
    from luminal.tensor import GraphTensor

    if isinstance(x, GraphTensor):
        if x.graph is not t.graph:
            raise DTypeError(f"{op}: the two tensors belong to different graphs")
        return x
    if _is_scalar(x):
        v = x.item() if isinstance(x, np.generic) else x
        if isinstance(v, float) and not t.dtype.is_float and not v.is_integer():
            raise DTypeError(f"{op}: float scalar {v} with a {t.dtype} tensor; cast the tensor to a float dtype first")
        if t.dtype == DType.bool and not isinstance(v, bool) and v not in (0, 1):
            raise DTypeError(f"{op}: scalar {v} with a bool tensor; cast the tensor first")
        try:
            return t.graph.constant(v, t.dtype)
        except DTypeError as e:  # e.g. an int scalar outside the tensor's range (numpy: OverflowError)
            raise DTypeError(f"{op}: {e}") from None
    raise DTypeError(f"{op}: cannot combine a tensor with {type(x).__name__} {x!r}")


def broadcast(a: GraphTensor, b: GraphTensor, op: str) -> tuple[GraphTensor, GraphTensor]:
    from luminal.frontend.movement import broadcast_shapes, expand

    if a.dtype != b.dtype:
        raise DTypeError(f"{op}: dtypes differ ({a.dtype} vs {b.dtype}); cast one side with .cast()")
    shape = broadcast_shapes(a.shape, b.shape, op=op)
    return expand(a, *shape), expand(b, *shape)


def binary_node(cls, a: GraphTensor, b, op: str) -> GraphTensor:
    b = lift(a, b, op)
    a, b = broadcast(a, b, op)
    return a.graph.node(cls(a.shape, a.view.strides, b.view.strides), [a, b], a.shape)


def _rlift(t: GraphTensor, x, op: str) -> GraphTensor:
    return lift(t, x, op)


def add(a, b):
    return binary_node(Add, a, b, "add")


def radd(a, b):
    return binary_node(Add, _rlift(a, b, "add"), a, "add")


def mul(a, b):
    return binary_node(Mul, a, b, "mul")


def rmul(a, b):
    return binary_node(Mul, _rlift(a, b, "mul"), a, "mul")


def neg(a: GraphTensor) -> GraphTensor:
    if a.dtype == DType.bool:
        raise DTypeError("neg of a bool tensor: use ~x for logical not")
    return mul(a, -1 if a.dtype.is_signed else int(np.iinfo(a.dtype.np).max))  # unsigned: -x wraps


def sub(a, b):
    b = lift(a, b, "sub")
    return add(a, neg(b))


def rsub(a, b):
    return sub(_rlift(a, b, "sub"), a)


def mod(a, b):
    return binary_node(Mod, a, b, "mod")


def rmod(a, b):
    return mod(_rlift(a, b, "mod"), a)


def _int_div(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """Truncating integer division: (a - a % b) / b is exact; computed in f64 and rounded."""
    q = (a - mod(a, b)).cast(DType.f64) * b.cast(DType.f64).reciprocal()
    q = q + 0.5 - lt(q, 0).cast(DType.f64)
    return q.cast(a.dtype)


def truediv(a, b):
    """a / b: truncating for integers, correctly rounded (IEEE) for floats (docs/numerics.md)."""
    b = lift(a, b, "div")
    wa, wb = broadcast(a, b, "div")
    if wa.dtype == DType.bool:
        raise DTypeError("div of bool tensors: cast to a numeric dtype first")
    if not wa.dtype.is_float:
        return _int_div(wa, wb)
    if wa.dtype != DType.f64:
        # f64(a) * RN(1 / f64(b)) is within 2^-52 (relative) of a / b, while a quotient of two floats
        # of p <= 24 bits is at least 2^-(2p+1) >= 2^-49 away from every midpoint of p-bit floats
        # (or is one of them exactly): so the one rounding to a's dtype is RN(a / b).
        return mul(a.cast(DType.f64), b.cast(DType.f64).reciprocal()).cast(a.dtype)  # 1/b before the broadcast
    return _div_f64(wa, wb)


# -- correctly rounded f64 division (Markstein correction, exact residuals from Dekker products) ----
SPLIT = float(2**27 + 1)  # Veltkamp: x * SPLIT separates x's top 26 bits
HI, LO = 2.0**480, 2.0**-500  # operands in [LO, HI]: no split, product or residual leaves the normal range


def _split(x: GraphTensor) -> tuple[GraphTensor, GraphTensor]:
    """x = hi + lo exactly, each with at most 26 significant bits (Veltkamp; |x| < 2^995)."""
    c = x * SPLIT
    hi = c - (c - x)
    return hi, x - hi


def _residual(a: GraphTensor, q: GraphTensor, b_split: tuple) -> GraphTensor:
    """a - q * b exactly (q within an ulp or so of a / b): Dekker's product q * b = p + e (every
    partial product of 26-bit halves is exact), a - p is exact by Sterbenz, and the residual is
    representable, so the last subtraction is exact too."""
    b, bh, bl = b_split
    qh, ql = _split(q)
    p = q * b
    e = ((qh * bh - p) + qh * bl + ql * bh) + ql * bl
    return (a - p) - e


def _into_range(x: GraphTensor) -> tuple[GraphTensor, GraphTensor, GraphTensor]:
    """(x 2^-k, 2^(k/2), 2^(-k/2)) with k in {-600, 0, 600} bringing a finite nonzero |x| into
    [LO, HI] (exact: power-of-two scales of normal values). The masks select exactly one term."""
    big, small = gt(x.abs(), HI).cast(DType.f64), lt(x.abs(), LO).cast(DType.f64)
    mid = 1.0 - big - small
    half = big * 2.0**300 + small * 2.0**-300 + mid
    return x * (big * 2.0**-600 + small * 2.0**600 + mid), half, big * 2.0**-300 + small * 2.0**300 + mid


def _div_f64(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """RN(a / b) for f64 a, b of one shape.

    Both operands are scaled by powers of two into [LO, HI]. There q0 = a y is within 2 ulps;
    q1 = q0 + r0 y (r0 = a - q0 b exact) is within 0.5 ulp + 2^-50 ulp, so RN(a / b) is q1 or its
    neighbour n toward a / b: the one with the smaller exact residual (a quotient of two floats is
    never a midpoint). Scaling back is exact unless the quotient is subnormal (then it may round
    twice). Zeros, infinities and NaN take q0 = a * RN(1 / b) (scaled), right for all of them.
    Each Mul rounds on its own on every backend (CUDA: __dmul_rn, never contracted into an FMA)."""
    from luminal.frontend.indexing import where

    a, ha, _ = _into_range(a)
    b, _, hb_inv = _into_range(b)
    y = b.reciprocal()
    q0 = q = a * y
    bs = (b, *_split(b))
    q = q + _residual(a, q, bs) * y
    r1 = _residual(a, q, bs)
    toward = ne(lt(r1, 0.0), lt(b, 0.0)).cast(DType.f64) * -2.0 + 1.0  # sign of a / b - q
    n = q + q.abs() * (0.6 * 2.0**-52) * toward  # q -+ [0.6, 1.2) ulp rounds to the neighbour
    better = lt(_residual(a, n, bs).abs(), r1.abs()).cast(DType.f64)
    q = q + better * (n - q)  # n - q is one ulp, exactly
    finite = lt(a.abs(), math.inf) & lt(b.abs(), math.inf) & gt(a.abs(), 0.0) & gt(b.abs(), 0.0)
    h = ha * hb_inv  # a / b = (a 2^-ka) / (b 2^-kb) * h^2 with h = 2^((ka - kb) / 2), exact
    return where(finite, q, q0) * h * h  # in two halves: h^2 may not be a float


def rtruediv(a, b):
    return truediv(_rlift(a, b, "div"), a)


def floordiv(a, b):
    from luminal.frontend.indexing import where

    plain = _is_scalar(b) and abs(float(b)) >= 1.0  # nonzero, and (a - r) / b cannot overflow
    b_value = b
    b = lift(a, b, "floordiv")
    a, b = broadcast(a, b, "floordiv")
    if not a.dtype.is_float:
        return truediv(a, b)
    if a.dtype.bits < 32:
        # 16/8-bit floats: the whole chain in f32, rounded once, as numpy does for f16 and ml_dtypes
        # for bf16 (rounding each step gave bf16 -276 // -1.71875 = 162, not 160, and made the result
        # depend on where a fused kernel keeps f32 registers). A scalar divisor stays a scalar (no
        # select for b == 0), rounded to a's dtype first like numpy's weak scalars.
        if _is_scalar(b_value):
            return floordiv(a.cast(DType.f32), float(np.asarray(b_value).astype(a.dtype.np))).cast(a.dtype)
        return floordiv(a.cast(DType.f32), b.cast(DType.f32)).cast(a.dtype)
    # numpy's floor_divide (npy_divmod): div = (a - fmod(a, b)) / b is an integer up to rounding;
    # one less when the remainder and the divisor have opposite signs; then floor(div), plus one
    # when div - floor(div) > 0.5. Every step is exact in the dtype (no `q + 0.5`, which rounds
    # to even once |q| >= 2^(p-1)). b == 0 gives a / b (inf, -inf or NaN) like numpy, and so does
    # a div that overflowed (then a / b is the same infinity).
    r = mod(a, b)
    div = truediv(a - r, b)
    div = div - (ne(r, 0.0) & ne(lt(r, 0.0), lt(b, 0.0))).cast(a.dtype)
    t = _trunc(div)
    q = t - lt(div, t).cast(a.dtype)  # floor
    q = q + gt(div - q, 0.5).cast(a.dtype)
    # a zero quotient takes the sign of a / b, as numpy's copysign(0, a / b) (-0.0 // 1 is -0.0):
    # (a / b) * 0 is that signed zero wherever the quotient is 0 (|a / b| < 1 there: finite)
    q = where(eq(q, 0.0), truediv(a, b) * 0.0, q)
    return q if plain else where(eq(b, 0.0) | eq(div.abs(), math.inf), truediv(a, b), q)


def _trunc(x: GraphTensor) -> GraphTensor:
    return x - mod(x, 1.0)


def where_sign(x: GraphTensor, v: float) -> GraphTensor:
    """v with the sign of x (+v for x >= 0 and NaN, -v for x < 0)."""
    return lt(x, 0.0).cast(x.dtype) * (-2 * v) + v


def rfloordiv(a, b):
    return floordiv(_rlift(a, b, "floordiv"), a)


# -- comparisons and logic ----------------------------------------------------------------------
def lt(a, b):
    return binary_node(LessThan, a, b, "lt")


def gt(a, b):
    b = lift(a, b, "gt")
    return lt(b, a)


def _require_bool(a: GraphTensor, op: str) -> None:
    if a.dtype != DType.bool:
        raise DTypeError(f"{op} needs bool tensors, got {a.dtype}; compare first (x > 0) or cast to lm.bool")


def logical_not(a: GraphTensor) -> GraphTensor:
    _require_bool(a, "~")
    return lt(a, True)  # x < True  <=>  not x


def logical_and(a, b):
    _require_bool(a, "&")
    return mul(a, b)


def logical_or(a, b):
    _require_bool(a, "|")
    return add(a, b)


def logical_xor(a, b):
    _require_bool(a, "^")
    return ne(a, b)


def _not_nan(a: GraphTensor) -> GraphTensor:
    return lt(a, math.inf) | gt(a, -math.inf)


def isnan(a: GraphTensor) -> GraphTensor:
    """Bool mask of NaN elements (all False for non-float dtypes)."""
    if not a.dtype.is_float:
        return lt(a, a)
    return ~_not_nan(a)


def eq(a, b):
    b = lift(a, b, "eq")
    a, b = broadcast(a, b, "eq")
    out = ~lt(a, b) & ~lt(b, a)
    if a.dtype.is_float:
        out = out & _not_nan(a) & _not_nan(b)
    return out


def ne(a, b):
    return ~eq(a, b)


def le(a, b):
    b = lift(a, b, "le")
    if a.dtype.is_float:
        return lt(a, b) | eq(a, b)
    return ~lt(b, a)


def ge(a, b):
    b = lift(a, b, "ge")
    return le(b, a)


# -- maximum / minimum --------------------------------------------------------------------------
def maximum(a, b):
    """Elementwise max like np.maximum: a NaN on either side (any sign bit) gives NaN."""
    return _select_extreme(a, b, "maximum", lambda x, y: lt(x, y))


def minimum(a, b):
    """Elementwise min like np.minimum: a NaN on either side (any sign bit) gives NaN."""
    return _select_extreme(a, b, "minimum", lambda x, y: lt(y, x))


def _select_extreme(a, b, op: str, take_b) -> GraphTensor:
    from luminal.frontend.indexing import where

    b_may_be_nan = not (_is_scalar(b) and not math.isnan(float(b)))
    b = lift(a, b, op)
    a, b = broadcast(a, b, op)
    if a.dtype == DType.bool:
        return a | b if op == "maximum" else a & b
    pick_b = take_b(a, b)  # false when a is NaN: a (NaN) is kept
    if a.dtype.is_float and b_may_be_nan:
        pick_b = pick_b | isnan(b)
    return where(pick_b, b, a)


def clip(a, lo=None, hi=None):
    out = a
    if lo is not None:
        out = maximum(out, lo)
    if hi is not None:
        out = minimum(out, hi)
    return out


def pow(a, e):
    """a ** e, numpy's semantics (docs/numerics.md, pow)."""
    from luminal.frontend.unary import in_f32

    if a.dtype == DType.bool:
        raise DTypeError("pow of a bool tensor: cast to a numeric dtype first")
    if _is_scalar(e) and not isinstance(e, bool) and float(e).is_integer():
        if not a.dtype.is_float and e < 0:
            raise DTypeError(f"pow: integers to negative integer powers are not allowed ({a.dtype} ** {e})")
        if not a.dtype.is_float or abs(float(e)) <= 16:
            return in_f32(_pow_small, a, int(e))
    if _is_scalar(e) and float(e) == 0.5 and a.dtype.is_float:
        return a.sqrt()
    if not a.dtype.is_float:
        if _is_scalar(e):
            raise DTypeError(f"pow: {a.dtype} ** {e!r}: integer powers take integer exponents; cast to a float dtype")
        e = lift(a, e, "pow")
        a, e = broadcast(a, e, "pow")
        return _pow_int(a, e)
    e = lift(a, e, "pow")
    a, e = broadcast(a, e, "pow")
    if a.dtype == DType.f64:
        return _pow_float(a, e)
    # narrower floats in f64, rounded once: exp2(e log2|a|) is then within ~2^-45 of a ** e, and
    # integer exponents < 64 are exact (binary powering) wherever a ** e fits 53 bits, so a result
    # of a's dtype (10 ** 3 = 1000), or a tie between two of them, rounds like numpy's
    return _pow_float(a.cast(DType.f64), e.cast(DType.f64)).cast(a.dtype)


def _pow_small(a: GraphTensor, n: int) -> GraphTensor:
    """a ** n for a Python int n by repeated squaring (exact where the result is; integers wrap).
    Floats use it for |n| <= 16."""
    if n == 0:  # 1 everywhere, NaN and inf included (numpy)
        return a.graph.full(a.shape, 1, a.dtype)
    acc = None
    for bit in bin(abs(n))[2:]:
        acc = acc * acc if acc is not None else None
        if bit == "1":
            acc = a if acc is None else acc * a
    return acc if n > 0 else acc.reciprocal()


POW_BITS = 6  # f64 integer exponents in [0, 64) are computed by binary powering


def _pow_float(a: GraphTensor, e: GraphTensor) -> GraphTensor:
    """exp2(e * log2|a|) with numpy's special cases, and binary powering for integer e in [0, 64)
    and |a| in [2^-15, 2^15] (no intermediate over- or underflows): exact whenever the result is a
    float of a's dtype (3.0 ** 6.0 = 729), like numpy's pow."""
    from luminal.frontend.indexing import where

    mag = (e * a.abs().log2()).exp2()
    is_int = eq(mod(e, 1.0), 0.0)
    odd = ne(mod(e, 2.0), 0.0)
    signed = lt(a, 0.0) | lt(a.reciprocal(), 0.0)  # negative base, -0.0 included (1/-0 = -inf)
    out = where(signed & is_int & odd, neg(mag), where(lt(a, 0.0) & ~is_int, math.nan, mag))
    acc, p = None, a
    for k in range(POW_BITS):
        bit = ~lt(mod(e, 2.0 ** (k + 1)), 2.0**k)  # bit k of e (e an integer >= 0)
        bf = bit.cast(a.dtype)
        f = bf * p + (1.0 - bf)  # exactly p or 1 (p is finite where the result is used)
        acc = f if acc is None else acc * f
        p = p * p
    ok = is_int & ~lt(e, 0.0) & lt(e, 2.0**POW_BITS) & ~lt(a.abs(), 2.0**-15) & ~gt(a.abs(), 2.0**15)
    out = where(ok, acc, out)
    return where(eq(e, 0.0) | eq(a, 1.0), 1.0, out)  # x ** 0 = 1 ** y = 1, NaNs included (numpy)


def _pow_int(a: GraphTensor, e: GraphTensor) -> GraphTensor:
    """Integer a ** e (e an integer tensor): binary powering over every bit of e, wrapping like
    numpy. A negative e gives the truncated 1 / a ** |e| (numpy raises): 1 for a = 1, +-1 for
    a = -1, 0 otherwise (0 ** -n included)."""
    dt = a.dtype
    acc, p = None, a
    for k in range(dt.bits - (1 if dt.is_signed else 0)):
        bit = ~lt(mod(e, 2 ** (k + 1)), 2**k) if k + 1 < dt.bits - (1 if dt.is_signed else 0) else ~lt(e, 2**k)
        bf = bit.cast(dt)
        f = bf * p + (1 - bf)  # p or 1
        acc = f if acc is None else acc * f
        p = p * p
    one = eq(a, 1).cast(dt)
    if dt.is_signed:
        m1 = eq(a, -1).cast(dt) * (1 - ne(mod(e, 2), 0).cast(dt) * 2)  # (-1) ** e
        negative = lt(e, 0).cast(dt)
        acc = acc * (1 - negative) + (one + m1) * negative
    return acc
