"""Data-dependent indexing built on Gather/Scatter: gather (np.take), take_along_axis, scatter,
where (a NaN-safe select), tril/triu, concat and stack."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from luminal.dtype import DType
from luminal.errors import DTypeError, ShapeError
from luminal.frontend.binary import lift
from luminal.frontend.movement import (
    broadcast_shapes,
    expand,
    flat_strides,
    norm_axis,
    scatter_flat,
    unflatten_index,
    unsqueeze,
)
from luminal.hlir import Gather
from luminal.shape.expr import ZERO, Expression, ge, z

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor


def _index_tensor(idx: GraphTensor, op: str) -> GraphTensor:
    """The user's index tensor, i32 or i64 (narrower ints widen to i32 losslessly)."""
    from luminal.tensor import GraphTensor

    if not isinstance(idx, GraphTensor):
        raise DTypeError(f"{op}: indices must be an integer tensor, got {type(idx).__name__} {idx!r}")
    if not idx.dtype.is_int:
        raise DTypeError(f"{op}: indices must be an integer tensor, got {idx.dtype}")
    return idx if idx.dtype in (DType.i32, DType.i64) else idx.cast(DType.i32)


def _axis_len(t: GraphTensor, a: int):
    """Size of axis a as an int, or as an i32 scalar tensor when symbolic."""
    n = t.shape[a]
    return n.value if n.is_num else _dimt(t, n)


def _from_end(idx: GraphTensor, n) -> GraphTensor:
    """numpy indexing: a negative index i counts from the end (i + n)."""
    return idx + (idx < 0).cast(DType.i32) * n


def _checked_axis_index(idx: GraphTensor, n) -> tuple[GraphTensor, GraphTensor]:
    """(i32 index in [0, n) or garbage, i32 mask 1 where the user's index was in [-n, n)).

    The range test runs in the index's own dtype, so an i64 index beyond the i32 range is outside
    (it never wraps to a valid one); the i32 cast of a tested-inside index is exact (n < 2^31)."""
    nn = n if isinstance(n, int) else n.cast(idx.dtype)
    inside = (~(idx < -nn) & (idx < nn)).cast(DType.i32)
    return _from_end(idx.cast(DType.i32), n), inside


def _checked_flat(flat: GraphTensor, inside: GraphTensor) -> GraphTensor:
    """flat where inside, else -1: Gather's own bounds check (every backend) then raises for it."""
    return flat * inside + (inside - 1)


def gather_flat(data: GraphTensor, flat_idx: GraphTensor) -> GraphTensor:
    """out[i] = data.flat[flat_idx[i]]: one Gather node of flat_idx's shape."""
    i, v = flat_idx.view, data.view
    return data.graph.node(Gather(i.dims, i.strides, v.dims, v.strides), [flat_idx, data], i.dims)


def _offsets(dims: Sequence[Expression], strides: Sequence[Expression], skip: set[int]) -> Expression:
    """sum_k index_k * strides[k] over the axes of `dims` not in skip, as an Expression in z."""
    out = ZERO
    for k, ik in enumerate(unflatten_index(dims)):
        if k not in skip:
            out = out + ik * strides[k]
    return out


def gather(t: GraphTensor, indices: GraphTensor, axis: int = 0) -> GraphTensor:
    """np.take(t, indices, axis): indices in [-n, n) select along `axis` (negatives from the end);
    any other index raises when the graph runs (docs/numerics.md, Indexing)."""
    a = norm_axis(t, axis, op="gather")
    idx = _index_tensor(indices, "gather")
    out_dims = (*t.shape[:a], *idx.shape, *t.shape[a + 1 :])
    ni = idx.ndim
    inner = flat_strides(t.shape)
    # flat index = outer offsets + idx * inner[a] + inner offsets; idx occupies axes a .. a+ni-1
    base_strides = [*inner[:a], *([ZERO] * ni), *inner[a + 1 :]]
    base = t.graph.iota(_offsets(out_dims, base_strides, set(range(a, a + ni))), out_dims)
    v = idx.view
    for _ in range(a):
        v = v.expand_dim(0, 1)
    for _ in range(t.ndim - a - 1):
        v = v.expand_dim(v.ndim, 1)
    full, inside = _checked_axis_index(expand(idx.with_view(v), *out_dims), _axis_len(t, a))
    step = inner[a].value if inner[a].is_num else _dimt(t, inner[a])
    return gather_flat(t, _checked_flat(base + full * step, inside))


def _dimt(t: GraphTensor, e: Expression) -> GraphTensor:
    return t.graph.iota(e, ())


def take_along_axis(t: GraphTensor, indices: GraphTensor, axis: int = -1, *, checked: bool = True) -> GraphTensor:
    """np.take_along_axis: indices has t's rank; other axes broadcast. An index outside [-n, n) of
    the axis raises when the graph runs (docs/numerics.md, Indexing); `checked=False` is for
    internal callers whose indices are in [0, n) by construction (topk)."""
    a = norm_axis(t, axis, op="take_along_axis")
    idx = _index_tensor(indices, "take_along_axis")
    if idx.ndim != t.ndim:
        raise ShapeError(f"take_along_axis: indices rank {idx.ndim} != tensor rank {t.ndim}")
    rest_t = tuple(d for k, d in enumerate(t.shape) if k != a)
    rest_i = tuple(d for k, d in enumerate(idx.shape) if k != a)
    shape = list(broadcast_shapes(rest_t, rest_i, op="take_along_axis"))
    out_dims = (*shape[:a], idx.shape[a], *shape[a:])
    inner = flat_strides(t.shape)
    strides = [s if t.shape[k] != 1 else ZERO for k, s in enumerate(inner)]
    base = t.graph.iota(_offsets(out_dims, strides, {a}), out_dims)
    step = inner[a].value if inner[a].is_num else _dimt(t, inner[a])
    n = _axis_len(t, a)
    if not checked:
        return gather_flat(t, base + _from_end(expand(idx, *out_dims).cast(DType.i32), n) * step)
    full, inside = _checked_axis_index(expand(idx, *out_dims), n)
    return gather_flat(t, _checked_flat(base + full * step, inside))


def scatter(t: GraphTensor, indices: GraphTensor, src: GraphTensor, axis: int = 0) -> GraphTensor:
    """Inverse of gather: a copy of t with t[.., indices[j], ..] = src[.., j, ..]; last write wins,
    indices in [-n, 0) count from the end, those outside [-n, n) are dropped (docs/numerics.md)."""
    a = norm_axis(t, axis, op="scatter")
    idx = _index_tensor(indices, "scatter")
    src = lift(t, src, "scatter")
    out_dims = (*t.shape[:a], *idx.shape, *t.shape[a + 1 :])
    ni = idx.ndim
    inner = flat_strides(t.shape)
    base_strides = [*inner[:a], *([ZERO] * ni), *inner[a + 1 :]]
    base = t.graph.iota(_offsets(out_dims, base_strides, set(range(a, a + ni))), out_dims)
    v = idx.view
    for _ in range(a):
        v = v.expand_dim(0, 1)
    for _ in range(t.ndim - a - 1):
        v = v.expand_dim(v.ndim, 1)
    full, inside = _checked_axis_index(expand(idx.with_view(v), *out_dims), _axis_len(t, a))
    step = inner[a].value if inner[a].is_num else _dimt(t, inner[a])
    # out-of-range indices (an i64 one beyond i32 included) must stay out of range after
    # flattening: send them past the end, where Scatter drops them
    flat = (base + full * step) * inside + (1 - inside) * _dimt(t, t.view.n_elements())
    return scatter_flat(t, flat, expand(src, *out_dims))


def where(cond, a, b) -> GraphTensor:
    """cond ? a : b, NaN-safe: a and b are interleaved into one buffer (Scatter) and the result is
    gathered at 2*i + cond."""
    from luminal.tensor import GraphTensor

    ref = next((x for x in (a, b, cond) if isinstance(x, GraphTensor)), None)
    if ref is None:
        raise DTypeError("where: at least one argument must be a tensor")
    if not isinstance(cond, GraphTensor) or cond.dtype != DType.bool:
        raise DTypeError("where: the condition must be a bool tensor (e.g. x > 0)")
    ta = a if isinstance(a, GraphTensor) else None
    tb = b if isinstance(b, GraphTensor) else None
    dt_src = ta if ta is not None else tb
    if dt_src is None:
        raise DTypeError("where: give a or b as a tensor so the result has a dtype")
    a, b = lift(dt_src, a, "where"), lift(dt_src, b, "where")
    if a.dtype != b.dtype:
        raise DTypeError(f"where: dtypes differ ({a.dtype} vs {b.dtype}); cast one side")
    shape = broadcast_shapes(cond.shape, a.shape, b.shape, op="where")
    a, b, cond = expand(a, *shape), expand(b, *shape), expand(cond, *shape)
    g = a.graph
    pair = b.with_view(b.view.expand_dim(b.ndim, 2))  # (*shape, 2) all b
    buf = scatter_flat(pair, g.iota(z * 2 + 1, shape), a)  # [b, a]
    pick = g.iota(z * 2, shape) + cond.cast(DType.i32)
    return gather_flat(buf, pick)


def where_method(t: GraphTensor, cond: GraphTensor, other) -> GraphTensor:
    """torch-style x.where(cond, other) = where(cond, x, other)."""
    return where(cond, t, other)


def _tri(t: GraphTensor, k: int, lower: bool) -> GraphTensor:
    if t.ndim < 2:
        raise ShapeError(f"{'tril' if lower else 'triu'} needs at least 2 dims, got shape {list(t.shape)}")
    r, c = t.shape[-2], t.shape[-1]
    i, j = unflatten_index((r, c))
    keep = ge(i + k, j) if lower else ge(j, i + k)
    mask = t.graph.iota(keep, (r, c)).cast(DType.bool)
    return where(mask, t, 0 if t.dtype != DType.bool else False)


def tril(t: GraphTensor, k: int = 0) -> GraphTensor:
    return _tri(t, k, True)


def triu(t: GraphTensor, k: int = 0) -> GraphTensor:
    return _tri(t, k, False)


def _tensor_list(ts, op: str) -> list[GraphTensor]:
    from luminal.tensor import GraphTensor

    if not isinstance(ts, (list, tuple)) or not all(isinstance(t, GraphTensor) for t in ts):
        raise ShapeError(f"{op} takes a list of tensors, got {ts!r}")
    if not ts:
        raise ShapeError(f"{op} of an empty list")
    if any(t.graph is not ts[0].graph for t in ts):
        raise ShapeError(f"{op}: the tensors belong to different graphs")
    return list(ts)


def concat(ts: Sequence[GraphTensor], axis: int = 0) -> GraphTensor:
    """Join along `axis`: every piece is scattered into its slot of one output buffer."""
    ts = _tensor_list(ts, "concat")
    t0 = ts[0]
    a = norm_axis(t0, axis, op="concat")
    for t in ts[1:]:
        if t.ndim != t0.ndim or any(t.shape[k] is not t0.shape[k] for k in range(t0.ndim) if k != a):
            raise ShapeError(f"concat: shapes {[list(t.shape) for t in ts]} differ outside axis {a}")
        if t.dtype != t0.dtype:
            raise DTypeError(f"concat: dtypes differ ({t0.dtype} vs {t.dtype})")
    total = ZERO
    for t in ts:
        total = total + t.shape[a]
    out_dims = (*t0.shape[:a], total, *t0.shape[a + 1 :])
    inner = flat_strides(out_dims)
    out = t0.graph.zeros(out_dims, t0.dtype)
    offset = ZERO
    for t in ts:
        e = ZERO
        for k, ik in enumerate(unflatten_index(t.shape)):
            e = e + (ik + offset if k == a else ik) * inner[k]
        out = scatter_flat(out, t0.graph.iota(e, t.shape), t)
        offset = offset + t.shape[a]
    return out


def stack(ts: Sequence[GraphTensor], axis: int = 0) -> GraphTensor:
    """Join along a new axis (numpy's stack: every tensor has the same shape)."""
    ts = _tensor_list(ts, "stack")
    a = norm_axis(ts[0], axis, 1, "stack")
    return concat([unsqueeze(t, a) for t in ts], a)
