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
        return t.graph.constant(v, t.dtype)
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
    return mul(a, -1)


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
    b = lift(a, b, "div")
    wa, wb = broadcast(a, b, "div")
    if wa.dtype == DType.bool:
        raise DTypeError("div of bool tensors: cast to a numeric dtype first")
    if not wa.dtype.is_float:
        return _int_div(wa, wb)
    return mul(a, b.reciprocal())  # 1/b before b is broadcast: once per element of b


def rtruediv(a, b):
    return truediv(_rlift(a, b, "div"), a)


def floordiv(a, b):
    from luminal.frontend.indexing import where

    nonzero_scalar = _is_scalar(b) and float(b) != 0.0
    b = lift(a, b, "floordiv")
    a, b = broadcast(a, b, "floordiv")
    if not a.dtype.is_float:
        return truediv(a, b)
    # numpy's floor_divide: (a - fmod(a, b)) / b is an integer up to rounding, so round it to
    # nearest, then step down when the remainder and the divisor have opposite signs; b == 0
    # gives a / b (inf, -inf or NaN), as numpy does.
    r = mod(a, b)
    q = truediv(a - r, b)
    q = _trunc(q + where_sign(q, 0.5))
    step_down = ne(r, 0.0) & ne(lt(r, 0.0), lt(b, 0.0))
    q = q - step_down.cast(a.dtype)
    return q if nonzero_scalar else where(eq(b, 0.0), truediv(a, b), q)


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
    """a ** e. Integer scalar exponents multiply (exact); others use exp2(e * log2|a|) with the
    sign of a negative base restored for integer exponents (NaN otherwise, like numpy)."""
    from luminal.frontend.indexing import where

    if _is_scalar(e) and float(e).is_integer() and abs(float(e)) <= 16:
        n = int(e)
        if n == 0:  # 1 everywhere, NaN and inf included (numpy)
            return a.graph.full(a.shape, 1, a.dtype)
        base, acc = a, None
        for bit in bin(abs(n))[2:]:
            acc = acc * acc if acc is not None else None
            if bit == "1":
                acc = base if acc is None else acc * base
        return acc if n > 0 else acc.reciprocal()
    if _is_scalar(e) and float(e) == 0.5:
        return a.sqrt()
    if not a.dtype.is_float:
        raise DTypeError(f"pow with a non-integer exponent on {a.dtype}: cast to a float dtype first")
    e = lift(a, e, "pow")
    a, e = broadcast(a, e, "pow")
    mag = (e * a.abs().log2()).exp2()
    is_int = eq(mod(e, 1.0), 0.0)
    odd = ne(mod(e, 2.0), 0.0)
    signed = lt(a, 0.0) | lt(a.reciprocal(), 0.0)  # negative base, -0.0 included (1/-0 = -inf)
    out = where(signed & is_int & odd, neg(mag), where(lt(a, 0.0) & ~is_int, math.nan, mag))
    return where(eq(e, 0.0) | eq(a, 1.0), 1.0, out)  # x ** 0 = 1 ** y = 1, NaNs included (numpy)
