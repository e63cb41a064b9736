"""Reduction ATen ops: sum / mean / prod / var, max / min / amax / amin, argmax / argmin, any / all,
softmax / log_softmax, cumsum, topk and sort."""

from __future__ import annotations

from luminal.dtype import DType
from luminal.torch.registry import aten


def _dims(x, dim):
    """torch's `dim` argument (None, [] = every axis; an int or a list) as luminal's `axis`."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    return list(dim) if isinstance(dim, (list, tuple)) else dim


@aten("sum.dim_IntList", note="`sum` accumulated in the output dtype (ints/bools -> i64)")
def sum_(c, x, dim=None, keepdim=False, dtype=None):
    x = x.cast(c.dtype)
    if x.ndim == 0:
        return x
    return x.sum(_dims(x, dim), keepdim=keepdim)


@aten("mean.dim", "mean.default", note="`mean`")
def mean(c, x, dim=None, keepdim=False, dtype=None):
    x = x.cast(c.dtype)
    return x if x.ndim == 0 else x.mean(_dims(x, dim), keepdim=keepdim)


@aten("prod.default", "prod.dim_int", note="`prod` (exact for integers below 2^53)")
def prod(c, x, dim=None, keepdim=False, dtype=None):
    x = x.cast(c.dtype)
    return x if x.ndim == 0 else x.prod(dim, keepdim=keepdim)


@aten("var.correction", note="`var` with Bessel's `correction`")
def var(c, x, dim=None, unbiased=None, keepdim=False, correction=None):
    corr = correction if correction is not None else (1 if unbiased in (None, True) else 0)
    return x.var(_dims(x, dim), keepdim=keepdim, correction=int(corr)).cast(c.dtype)


def _extreme(method: str):
    def fn(c, x, dim=None, keepdim=False):
        if x.ndim == 0:
            return x
        if x.dtype == DType.bool:
            return getattr(x.cast(DType.i32), method)(_dims(x, dim), keepdim=keepdim).cast(DType.bool)
        return getattr(x, method)(_dims(x, dim), keepdim=keepdim)

    return fn


aten("amax.default", "max.default", note="`max` (NaN-propagating)")(_extreme("max"))
aten("amin.default", "min.default", note="`min` (NaN-propagating)")(_extreme("min"))


def _arg(method: str):
    def fn(c, x, dim=None, keepdim=False):
        if x.ndim == 0:
            return c.graph.constant(0, DType.i64)
        src = x.cast(DType.i32) if x.dtype == DType.bool else x
        if dim is None:
            out = getattr(src.reshape(-1), method)(0)
            return out.reshape(*([1] * x.ndim)) if keepdim else out
        return getattr(src, method)(dim, keepdim=keepdim)

    return fn


aten("argmax.default", note="`argmax` (first maximum, NaN counts as largest)")(_arg("argmax"))
aten("argmin.default", note="`argmin` (first minimum)")(_arg("argmin"))


@aten("max.dim", note="(`max`, `argmax`) along `dim`")
def max_dim(c, x, dim, keepdim=False):
    return _extreme("max")(c, x, dim, keepdim), _arg("argmax")(c, x, dim, keepdim)


@aten("min.dim", note="(`min`, `argmin`) along `dim`")
def min_dim(c, x, dim, keepdim=False):
    return _extreme("min")(c, x, dim, keepdim), _arg("argmin")(c, x, dim, keepdim)


@aten("any.default", "any.dim", "any.dims", note="count of the true elements > 0 (False over an empty axis)")
def any_(c, x, dim=None, keepdim=False):
    b = x if x.dtype == DType.bool else x.ne(0)
    if b.ndim == 0:
        return b
    return b.cast(DType.i64).sum(_dims(b, dim), keepdim=keepdim) > 0  # a max would have no value when empty


@aten("_softmax.default", note="`softmax` (max-subtracted), in f32 for 16-bit inputs")
def softmax(c, x, dim, half_to_float=False):
    if x.ndim == 0:
        return c.graph.full((), 1.0, c.dtype)
    wide = x.cast(DType.f32) if x.dtype in (DType.f16, DType.bf16) else x
    return wide.softmax(dim).cast(c.dtype)


@aten("_log_softmax.default", note="`log_softmax`, in f32 for 16-bit inputs")
def log_softmax(c, x, dim, half_to_float=False):
    if x.ndim == 0:
        return c.graph.full((), 0.0, c.dtype)
    wide = x.cast(DType.f32) if x.dtype in (DType.f16, DType.bf16) else x
    return wide.log_softmax(dim).cast(c.dtype)


@aten("cumsum.default", note="`cumsum` (ints/bools accumulate in i64)")
def cumsum(c, x, dim, dtype=None):
    x = x.cast(c.dtype)
    return x if x.ndim == 0 else x.cumsum(dim)


@aten("topk.default", note="`topk` (largest or smallest; ties -> lower index)")
def topk(c, x, k, dim=-1, largest=True, sorted=True):
    if largest:
        return x.topk(int(k), dim)
    vals, idx = (-x).topk(int(k), dim)
    return -vals, idx


@aten("sort.default", "sort.stable", note="full-length `topk` (stable: ties keep their order)")
def sort(c, x, dim=-1, descending=False, stable=None):
    if isinstance(dim, bool) and stable is None:  # sort.stable(x, *, stable, dim, descending) positional form
        dim = -1
    n = x.shape[dim]
    if not n.is_num:
        raise c.unsupported(f"sort along a symbolic axis ({n}) needs a concrete length")
    if descending:
        return x.topk(n.value, dim)
    vals, idx = (-x).topk(n.value, dim)  # ascending = descending of the negation; ties keep their order
    return -vals, idx
