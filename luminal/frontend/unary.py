"""Unary ops: the five unary primitives and everything composed from them (exp, tanh, gelu...)."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from luminal.dtype import DType, to_dtype
from luminal.errors import DTypeError
from luminal.hlir import Cast, Exp2, Log2, Recip, Sin, Sqrt
from luminal.shape.tracker import ShapeTracker

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)


def _need_float(t: GraphTensor, name: str) -> None:
    if not t.dtype.is_float:
        raise DTypeError(f"{name} of a {t.dtype} tensor: cast to a float dtype first, e.g. x.cast(lm.f32).{name}()")


def _unary(cls, t: GraphTensor, name: str) -> GraphTensor:
    _need_float(t, name)
    return t.graph.node(cls(t.shape, t.view.strides), [t], t.shape)


def _float_op(fn):
    """Composite float-only ops check the dtype under their own name (not that of a part), and run
    in f32 for 16/8-bit floats, rounding once at the end (docs/numerics.md, Transcendentals): a
    16-bit exp(x) = exp2(x log2 e) would round the product to 16 bits and lose ~1% at x = 10."""

    @functools.wraps(fn)
    def wrapped(t, *args, **kwargs):
        _need_float(t, fn.__name__)
        return in_f32(fn, t, *args, **kwargs)

    return wrapped


def in_f32(fn, t: GraphTensor, *args, **kwargs) -> GraphTensor:
    """fn(t) computed in f32 and rounded once to t's dtype when t is a float narrower than f32."""
    if t.dtype.is_float and t.dtype.bits < 32:
        return fn(t.cast(DType.f32), *args, **kwargs).cast(t.dtype)
    return fn(t, *args, **kwargs)


def log2(t):
    return _unary(Log2, t, "log2")


def exp2(t):
    return _unary(Exp2, t, "exp2")


def sin(t):
    return _unary(Sin, t, "sin")


def sqrt(t):
    return _unary(Sqrt, t, "sqrt")


def reciprocal(t):
    return _unary(Recip, t, "reciprocal")


@_float_op
def exp(t):
    return exp2(t * LOG2E)


@_float_op
def log(t):
    return log2(t) * LN2


@_float_op
def cos(t):
    return sin(t + math.pi / 2)


@_float_op
def rsqrt(t):
    return reciprocal(sqrt(t))


def square(t):
    return t * t


def abs(t):
    if not t.dtype.is_signed:
        return t
    return t * (1 - (t < 0).cast(t.dtype) * 2)


def _sign(t):
    """-1, 0 or 1 (0 for NaN): for compositions whose result is NaN anyway when t is."""
    return (t > 0).cast(t.dtype) - (t < 0).cast(t.dtype)


def sign(t):
    """numpy's sign: -1, 0 or 1, NaN for NaN."""
    if t.dtype == DType.bool:
        return t
    s = _sign(t)
    if not t.dtype.is_float:
        return s
    from luminal.frontend.binary import isnan
    from luminal.frontend.indexing import where

    return where(isnan(t), t, s)


def relu(t):
    return t.maximum(0)


@_float_op
def sigmoid(t):
    return reciprocal(exp(-t) + 1)


@_float_op
def silu(t):
    return t * sigmoid(t)


@_float_op
def tanh(t):
    return sigmoid(t * 2) * 2 - 1


@_float_op
def softplus(t):
    """log(1 + e^x), computed stably as relu(x) + log(1 + e^-|x|)."""
    return relu(t) + log(exp(-abs(t)) + 1)


@_float_op
def gelu(t):
    """Exact GELU x * Phi(x), erf by Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7)."""
    x = t * (1 / math.sqrt(2))
    ax = abs(x)
    k = reciprocal(ax * 0.3275911 + 1)
    poly = ((((k * 1.061405429 - 1.453152027) * k + 1.421413741) * k - 0.284496736) * k + 0.254829592) * k
    erf_abs = 1 - poly * exp(-(ax * ax))
    erf = erf_abs * _sign(x)  # x NaN: erf_abs is NaN already
    return t * (erf + 1) * 0.5


@_float_op
def gelu_tanh(t):
    """GELU with the tanh approximation (HF `gelu_pytorch_tanh`)."""
    inner = (t + t * t * t * 0.044715) * math.sqrt(2 / math.pi)
    return t * (tanh(inner) + 1) * 0.5


def cast(t: GraphTensor, dtype) -> GraphTensor:
    """Convert to `dtype` (numerics.md: float->int truncates and saturates). Broadcast axes are
    kept as views, so a cast never materializes an expand."""
    dt = to_dtype(dtype)
    if dt == t.dtype:
        return t
    v = t.view
    keep = [k for k in range(v.ndim) if not v.is_broadcast(k)]
    dims = tuple(v.dims[k] for k in keep)
    strides = tuple(v.strides[k] for k in keep)
    out = t.graph.node(Cast(dims, strides, dt), [t], dims)
    full = ShapeTracker.new(dims)
    tr = ShapeTracker(tuple(v.dims), tuple(full.strides[keep.index(k)] if k in keep else v.strides[k]
                                            for k in range(v.ndim)))  # fmt: skip
    return out.with_view(tr)
