"""Reductions (one SumReduce/MaxReduce per axis) and what is built from them: mean, var, softmax,
norms, argmax, cumsum and topk."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from luminal.dtype import DType
from luminal.errors import DTypeError, ShapeError
from luminal.frontend.binary import isnan
from luminal.frontend.indexing import take_along_axis, where
from luminal.frontend.movement import (
    axis_list,
    expand,
    flat_strides,
    norm_axis,
    scatter_flat,
    unflatten_index,
    unsqueeze,
)
from luminal.hlir import Gather, MaxReduce, SumReduce
from luminal.shape.expr import ZERO, Expression, ge, lt, z
from luminal.shape.expr import prod as expr_prod

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor

Axis = int | Sequence[int] | None


def _axes(t: GraphTensor, axis: Axis, op: str) -> list[int]:
    if axis is None:
        return list(range(t.ndim))
    axes = axis_list(axis, op)
    out = sorted({norm_axis(t, a, op=op) for a in axes})
    if len(out) != len(axes):
        raise ShapeError(f"{op}: repeated axis in {axis}")
    return out


def _reduce(cls, t: GraphTensor, axis: Axis, keepdim: bool, op: str) -> GraphTensor:
    axes = _axes(t, axis, op)
    for a in reversed(axes):
        v = t.view
        shape = v.dims[:a] + v.dims[a + 1 :]
        strides = v.strides[:a] + v.strides[a + 1 :]
        t = t.graph.node(cls(shape, v.dims[a], strides, v.strides[a]), [t], shape)
    if keepdim:
        for a in axes:
            t = unsqueeze(t, a)
    return t


def _numeric(t: GraphTensor) -> GraphTensor:
    return t.cast(DType.i32) if t.dtype == DType.bool else t


def sum(t, axis: Axis = None, keepdim: bool = False):
    return _reduce(SumReduce, _numeric(t), axis, keepdim, "sum")


def max(t, axis: Axis = None, keepdim: bool = False):
    """Largest element; like numpy, any NaN in the reduced elements gives NaN."""
    if t.dtype == DType.bool:
        return _reduce(MaxReduce, t.cast(DType.u8), axis, keepdim, "max").cast(DType.bool)
    m = _reduce(MaxReduce, t, axis, keepdim, "max")
    if not t.dtype.is_float:
        return m
    # MaxReduce orders floats totally, so a NaN with its sign bit set (the NaN x86 arithmetic
    # produces) would lose to every number: propagate NaNs explicitly.
    any_nan = _reduce(MaxReduce, isnan(t).cast(DType.u8), axis, keepdim, "max").cast(DType.bool)
    return where(any_nan, math.nan, m)


def _flip(t: GraphTensor) -> GraphTensor:
    """An order-reversing map: -x for floats, ~x (= all-ones - x, wrapping) for ints."""
    if t.dtype.is_float:
        return -t
    return (255 if t.dtype == DType.u8 else -1) - t


def min(t, axis: Axis = None, keepdim: bool = False):
    if t.dtype == DType.bool:
        return max(~t, axis, keepdim).__invert__()
    return _flip(max(_flip(t), axis, keepdim))


def _count(t: GraphTensor, axis: Axis) -> Expression:
    return expr_prod(t.shape[a] for a in _axes(t, axis, "mean"))


def _float(t: GraphTensor, op: str) -> None:
    if not t.dtype.is_float:
        raise DTypeError(f"{op} of a {t.dtype} tensor: cast to a float dtype first")


def _dim_scalar(t: GraphTensor, n: Expression) -> GraphTensor:
    """The (possibly symbolic) count n as a scalar tensor of t's float dtype."""
    if n.is_num:
        return t.graph.constant(float(n.value), t.dtype)
    return t.graph.iota(n, ()).cast(t.dtype)


def mean(t, axis: Axis = None, keepdim: bool = False):
    """Sum / count, for 16/8-bit floats in f32 (neither the sum nor the count may overflow f16)."""
    _float(t, "mean")
    x = _wide(t)
    return (sum(x, axis, keepdim) / _dim_scalar(x, _count(x, axis))).cast(t.dtype)


def _wide(t: GraphTensor) -> GraphTensor:
    """Floats narrower than f32 as f32: statistics (var, norms) subtract a mean, and rounding that
    mean to 16 bits would cancel most of the difference's precision (docs/numerics.md)."""
    return t.cast(DType.f32) if t.dtype.bits < 32 else t


def var(t, axis: Axis = None, keepdim: bool = False, correction: int = 0):
    _float(t, "var")
    x = _wide(t)
    d = x - mean(x, axis, keepdim=True)
    return (sum(d * d, axis, keepdim) / _dim_scalar(x, _count(x, axis) - correction)).cast(t.dtype)


def std(t, axis: Axis = None, keepdim: bool = False, correction: int = 0):
    _float(t, "std")
    return var(_wide(t), axis, keepdim, correction).sqrt().cast(t.dtype)


def prod_(t, axis: Axis = None, keepdim: bool = False):
    """Product: exp2 of the sum of log2|x|, the sign from the count of negatives (0 if any zero).
    16-bit floats compute in f32 and integers in f64 (rounded to nearest: exact while the product
    fits in 2^53; out-of-range integer products saturate instead of wrapping, docs/numerics.md)."""
    wide = DType.f64 if not t.dtype.is_float else DType.f32 if t.dtype.bits < 32 else t.dtype
    x = t.cast(wide)
    mag = sum(x.abs().log2(), axis, keepdim).exp2()
    negs = sum((x < 0).cast(DType.i32), axis, keepdim)
    sign = 1 - (negs % 2).cast(wide) * 2
    out = mag * sign
    if not t.dtype.is_float:
        out = out + sign * 0.5  # round to nearest before the truncating cast
    return out.cast(t.dtype)


def argmax(t, axis: int = -1, keepdim: bool = False):
    """i32 index of the first maximum along `axis`."""
    a = norm_axis(t, axis, op="argmax")
    n = t.shape[a]
    m = max(t, a, keepdim=True)
    hit = t.eq(expand(m, *t.shape))
    if t.dtype.is_float:
        hit = hit | isnan(t)  # the max is NaN then: the first NaN wins, like numpy
    hit = hit.cast(DType.i32)
    rev = t.graph.iota(n - 1 - z, (n,))  # n-1-j: the first hit has the largest value
    shape = [1] * t.ndim
    shape[a] = n
    rev = rev.reshape(*shape)
    best = max(hit * rev, a, keepdim)
    return (n.value - 1 if n.is_num else t.graph.iota(n - 1, ())) - best


def argmin(t, axis: int = -1, keepdim: bool = False):
    return argmax(_flip(t), axis, keepdim)


def _row_max(t: GraphTensor, axis: int) -> GraphTensor:
    """The plain MaxReduce (total order), enough for softmax: a NaN anywhere in a row makes the
    whole row NaN whichever element the max picks (x - max, then the sum, carry it), and a row
    holding +inf is NaN as in numpy (inf - inf). So the NaN propagation `max` adds is not needed."""
    return _reduce(MaxReduce, t, axis, True, "softmax")


def softmax(t, axis: int = -1):
    """exp(x - max) / sum; 16/8-bit floats compute in f32 and round once (docs/numerics.md). The
    division is by the row sum, a multiply by its reciprocal (one rounding more, documented)."""
    _float(t, "softmax")
    x = _wide(t)
    e = (x - _row_max(x, axis)).exp()
    return (e * sum(e, axis, keepdim=True).reciprocal()).cast(t.dtype)


def log_softmax(t, axis: int = -1):
    _float(t, "log_softmax")
    x = _wide(t)
    s = x - _row_max(x, axis)
    return (s - sum(s.exp(), axis, keepdim=True).log()).cast(t.dtype)


def layer_norm(t, axis: Axis = -1, eps: float = 1e-5):
    _float(t, "layer_norm")
    x = _wide(t)
    d = x - mean(x, axis, keepdim=True)
    return (d * (mean(d * d, axis, keepdim=True) + eps).rsqrt()).cast(t.dtype)


def rms_norm(t, axis: Axis = -1, eps: float = 1e-6):
    _float(t, "rms_norm")
    x = _wide(t)
    return (x * (mean(x * x, axis, keepdim=True) + eps).rsqrt()).cast(t.dtype)


def cumsum(t, axis: int = -1):
    """Inclusive prefix sum: sum_j x[j] * [j <= i], read through a gather from x padded with one
    zero so masked-off elements are real zeros (no 0 * inf)."""
    a = norm_axis(t, axis, op="cumsum")
    x = _numeric(t).transpose(a, -1) if a != t.ndim - 1 else _numeric(t)
    n = x.shape[-1]
    padded = x.pad([(0, 0)] * (x.ndim - 1) + [(0, 1)])  # (..., n+1), last is 0
    dims = (*x.shape, n)  # (..., i, j)
    idx = unflatten_index(dims)
    i, j = idx[-2], idx[-1]
    row = ZERO
    for k, s in zip(idx[:-2], flat_strides(padded.shape)[:-1], strict=False):
        row = row + k * s
    src = row + j + ge(j, i + 1) * (n - j)  # j <= i ? j : n (the zero)
    g = t.graph
    index = g.iota(src, dims)
    pv = padded.view
    tri = g.node(Gather(index.view.dims, index.view.strides, pv.dims, pv.strides), [index, padded], dims)
    out = sum(tri, -1)
    return out.transpose(a, -1) if a != t.ndim - 1 else out


def topk(t, k: int, axis: int = -1):
    """(values, indices) of the k largest along `axis`, descending; ties -> lower index first."""
    a = norm_axis(t, axis, op="topk")
    x = t.transpose(a, -1) if a != t.ndim - 1 else t
    n = x.shape[-1]
    if not n.is_num:
        raise ShapeError(f"topk: axis {a} has the symbolic length {n}; topk needs a static length")
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= n.value:
        raise ShapeError(f"topk: k={k!r} must be an int in [0, {n}] (the length of axis {a})")
    xi = unsqueeze(x, -1)  # (..., i, 1)
    xj = unsqueeze(x, -2)  # (..., 1, j)
    g = t.graph
    dims = (*x.shape, n)
    ij = unflatten_index(dims)
    before = g.iota(lt(ij[-1], ij[-2]), dims).cast(DType.bool)  # j < i
    beats = (xj > xi) | (xj.eq(xi) & before)
    rank = sum(beats.cast(DType.i32), -1)  # (..., i): position of element i in sorted order
    row_base = g.iota((z // n) * n, x.shape)
    order = scatter_flat(g.zeros(x.shape, DType.i32), row_base + rank, g.iota(z % n, x.shape))
    idx = order[..., :k]
    vals = take_along_axis(x, idx, -1, checked=False)  # ranks are in [0, n) by construction
    if a != t.ndim - 1:
        vals, idx = vals.transpose(a, -1), idx.transpose(a, -1)
    return vals, idx


prod = prod_
