"""Movement ops: views (permute, expand, reshape, squeeze, slices with start 0) and the
Iota + Gather / Scatter compositions for what a view cannot express (offsets, steps, padding)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from luminal.errors import ShapeError
from luminal.hlir import Gather, Scatter
from luminal.shape.expr import INF, ONE, ZERO, Expression, ExprLike, ceil_div, expr, maximum, minimum, prod, z
from luminal.shape.tracker import MAX_RANK, ShapeTracker

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor


def norm_axis(t: GraphTensor, axis: int, extra: int = 0, op: str = "op") -> int:
    n = t.ndim + extra
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not -n <= axis < max(n, 1):
        raise ShapeError(f"{op}: axis {axis} is out of range for a tensor of shape {list(t.shape)}")
    return axis % n if n else 0


def axis_list(axis, op: str) -> list[int]:
    """An int or a sequence of ints as a list (ShapeError for anything else)."""
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis) if isinstance(axis, (tuple, list)) else None
    if axes is None or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes):
        raise ShapeError(f"{op}: axis must be an int or a tuple of ints, got {axis!r}")
    return [int(a) for a in axes]


def same_dim(a: Expression, b: Expression) -> bool:
    return a is b


def flat_strides(dims: Sequence[Expression]) -> list[Expression]:
    """Row-major element strides (numbers, not z-expressions) of `dims`."""
    out: list[Expression] = []
    acc: Expression = ONE
    for d in reversed(dims):
        out.append(acc)
        acc = acc * d
    return out[::-1]


def unflatten_index(dims: Sequence[Expression], flat: Expression = z) -> list[Expression]:
    """Per-axis indices of a flat row-major index `flat` over `dims`."""
    inner = flat_strides(dims)
    return [(flat // s) % d if k else flat // s for k, (s, d) in enumerate(zip(inner, dims, strict=True))]


def is_whole(t: GraphTensor) -> bool:
    """The view is the node's whole buffer in row-major order."""
    return t.view.is_contiguous() and t.view.n_elements() is t.graph.nodes[t.id].size


def contiguous(t: GraphTensor) -> GraphTensor:
    """A tensor whose buffer is exactly this view, row-major (copies through Gather if needed)."""
    if is_whole(t):
        return t
    idx = t.graph.iota(z, (t.view.n_elements(),))
    v = t.view
    out = t.graph.node(Gather(idx.view.dims, idx.view.strides, v.dims, v.strides), [idx, t], (v.n_elements(),))
    return out.with_view(ShapeTracker.new(v.dims))


def permute(t: GraphTensor, *axes: int) -> GraphTensor:
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    ax = tuple(norm_axis(t, a, op="permute") for a in axes)
    if sorted(ax) != list(range(t.ndim)):
        raise ShapeError(f"permute{axes}: not a permutation of the {t.ndim} axes of shape {list(t.shape)}")
    return t.with_view(t.view.permute(ax))


def transpose(t: GraphTensor, a: int = -2, b: int = -1) -> GraphTensor:
    a, b = norm_axis(t, a, op="transpose"), norm_axis(t, b, op="transpose")
    ax = list(range(t.ndim))
    ax[a], ax[b] = ax[b], ax[a]
    return t.with_view(t.view.permute(tuple(ax)))


def unsqueeze(t: GraphTensor, axis: int) -> GraphTensor:
    return t.with_view(t.view.expand_dim(norm_axis(t, axis, 1, "unsqueeze"), 1))


def squeeze(t: GraphTensor, axis: int | Sequence[int] | None = None) -> GraphTensor:
    if axis is None:
        axes = [k for k, d in enumerate(t.shape) if d == 1]
    else:
        axes = [norm_axis(t, a, op="squeeze") for a in axis_list(axis, "squeeze")]
        for a in axes:
            if t.shape[a] != 1:
                raise ShapeError(f"squeeze: axis {a} of shape {list(t.shape)} has size {t.shape[a]}, not 1")
    v = t.view
    for a in sorted(axes, reverse=True):
        v = v.remove_dim(a)
    return t.with_view(v)


def expand(t: GraphTensor, *shape: ExprLike) -> GraphTensor:
    """Broadcast to `shape` like np.broadcast_to (-1 keeps a dim); new leading axes are stride 0."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if len(shape) < t.ndim or len(shape) > MAX_RANK:
        raise ShapeError(f"expand: cannot broadcast shape {list(t.shape)} to {list(shape)}")
    v = t.view
    lead = len(shape) - t.ndim
    for _ in range(lead):
        v = v.expand_dim(0, 1)
    for k, want in enumerate(shape):
        if isinstance(want, int) and want == -1:
            if k < lead:
                raise ShapeError(f"expand: -1 is not allowed for the new leading axis {k} in {list(shape)}")
            continue
        w = expr(want)
        if v.dims[k] is w:
            continue
        if v.dims[k] != 1:
            raise ShapeError(
                f"expand: cannot broadcast shape {list(t.shape)} to {list(shape)}: axis {k} is {v.dims[k]}, "
                f"not 1, so it cannot become {w}"
            )
        v = v.broadcast_axis(k, w)
    return t.with_view(v)


def broadcast_shapes(*shapes: tuple[Expression, ...], op: str = "op") -> tuple[Expression, ...]:
    n = max(len(s) for s in shapes)
    out = []
    for k in range(n):
        ds = [s[len(s) - n + k] for s in shapes if len(s) - n + k >= 0]
        big = [d for d in ds if d != 1]
        if any(d is not big[0] for d in big):
            raise ShapeError(f"{op}: shapes {[list(s) for s in shapes]} do not broadcast (axis {k}: {ds})")
        out.append(big[0] if big else ONE)
    return tuple(out)


def reshape(t: GraphTensor, *shape: ExprLike) -> GraphTensor:
    """Reshape (one -1 allowed). A view when the data is contiguous or only adjacent dims merge."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    total = t.view.n_elements()
    dims = [None if (isinstance(d, int) and d == -1) else expr(d) for d in shape]
    if dims.count(None) > 1:
        raise ShapeError(f"reshape{tuple(shape)}: only one -1 is allowed")
    if None in dims:
        known = prod(d for d in dims if d is not None)
        if known == 0:  # numpy: ambiguous
            raise ShapeError(f"reshape{tuple(shape)}: -1 is ambiguous next to a size-0 dim ({list(t.shape)})")
        dims[dims.index(None)] = total // known
    new = tuple(dims)  # type: ignore[arg-type]
    if prod(new) is not total:
        raise ShapeError(f"reshape: cannot reshape {list(t.shape)} ({total} elements) into {list(new)}")
    if t.view.is_contiguous():
        return t.with_view(ShapeTracker.new(new))
    v = _merge_split(t.view, new)
    if v is not None:
        return t.with_view(v)
    return contiguous(t).with_view(ShapeTracker.new(new))


def _merge_split(v: ShapeTracker, new: tuple[Expression, ...]) -> ShapeTracker | None:
    """Express a reshape as a view by merging groups of old dims and splitting linear-stride ones."""
    old = list(v.dims)
    i = j = 0
    out = v
    pos = 0  # axis in `out` being built
    while i < len(old) and j < len(new):
        if old[i] is new[j]:
            i, j, pos = i + 1, j + 1, pos + 1
            continue
        # merge old dims until their product equals new[j]
        acc, k = old[i], i + 1
        while k < len(old) and acc is not new[j] and acc != INF:
            acc = acc * old[k]
            k += 1
        if acc is new[j]:
            for _ in range(k - i - 1):
                out = out.merge_dims(pos)
            i, j, pos = k, j + 1, pos + 1
            continue
        # split old[i] into new dims whose product is old[i]
        acc2, m = new[j], j + 1
        while m < len(new) and acc2 is not old[i]:
            acc2 = acc2 * new[m]
            m += 1
        if acc2 is not old[i]:
            return None
        for q in range(j, m - 1):
            split = out.split_dim(pos, prod(new[q + 1 : m]))
            if split is None:
                return None
            out = split
            pos += 1
        i, j, pos = i + 1, m, pos + 1
    if i != len(old) or j != len(new):
        rest_old, rest_new = old[i:], new[j:]
        if any(d != 1 for d in rest_old) or any(d != 1 for d in rest_new):
            return None
        for _ in rest_old:
            out = out.remove_dim(out.ndim - 1)
        for _ in rest_new:
            out = out.expand_dim(out.ndim, 1)
    return out


def flatten(t: GraphTensor, start: int = 0, end: int = -1) -> GraphTensor:
    if t.ndim == 0:
        return reshape(t, 1)
    s, e = norm_axis(t, start, op="flatten"), norm_axis(t, end, op="flatten")
    v = t.view
    for _ in range(e - s):
        v = v.merge_dims(s)
    return t.with_view(v)


def repeat(t: GraphTensor, *reps: ExprLike) -> GraphTensor:
    """Tile like np.tile (a view: strides become z % dim)."""
    if len(reps) == 1 and isinstance(reps[0], (tuple, list)):
        reps = tuple(reps[0])
    while t.ndim < len(reps):
        t = unsqueeze(t, 0)
    reps = (1,) * (t.ndim - len(reps)) + tuple(reps)
    for r in reps:
        if expr(r).is_num and expr(r).value < 0:
            raise ShapeError(f"repeat{tuple(reps)}: repetition counts must be >= 0 (shape {list(t.shape)})")
    v = t.view
    for k, r in enumerate(reps):
        if expr(r) != 1:
            v = v.repeat_axis(k, r)
    return t.with_view(v)


def gather_view(t: GraphTensor, dims: Sequence[Expression], index: Expression) -> GraphTensor:
    """New tensor of `dims` whose element at flat z is element `index(z)` (flat, logical) of t."""
    idx = t.graph.iota(index, tuple(dims))
    v = t.view
    out = t.graph.node(Gather(idx.view.dims, idx.view.strides, v.dims, v.strides), [idx, t], tuple(dims))
    return out


def _slice_bounds(s: slice, d: Expression, axis: int, shape) -> tuple[Expression, Expression, int]:
    step = 1 if s.step is None else s.step
    if not isinstance(step, int) or step == 0:
        raise ShapeError(f"slice step must be a non-zero int, got {s.step!r} (axis {axis} of {list(shape)})")

    def bound(x, default: Expression) -> Expression:
        if x is None:
            return default
        e = expr(x)
        if e.is_num and e.value < 0:
            e = d + e
        return e

    concrete = all(x is None or isinstance(x, int) for x in (s.start, s.stop))
    if d.is_num and concrete:
        start, stop, _ = s.indices(d.value)
        return expr(start), expr(len(range(start, stop, step))), step
    if step > 0:  # start and stop clamped to [0, d]; the length as max(stop - start, 0) keeps chains small
        start = ZERO if s.start is None else maximum(minimum(bound(s.start, ZERO), d), ZERO)
        stop = d if s.stop is None else maximum(minimum(bound(s.stop, d), d), ZERO)
        n = maximum(stop - start, ZERO)
        return start, ceil_div(n, step) if step > 1 else n, step
    if s.start is not None or s.stop is not None:
        raise ShapeError(f"negative-step slices of the symbolic axis {axis} ({d}) need start and stop left out")
    return d - 1, ceil_div(d, -step), step


def getitem(t: GraphTensor, key) -> GraphTensor:
    """Indexing with ints, slices (negative and stepped), None and Ellipsis."""
    if not isinstance(key, tuple):
        key = (key,)
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise ShapeError("an index can only have a single ellipsis ('...')")
    if n_real > t.ndim:
        raise ShapeError(f"too many indices ({n_real}) for a tensor of shape {list(t.shape)}")
    if Ellipsis in key:
        e = key.index(Ellipsis)
        key = key[:e] + (slice(None),) * (t.ndim - n_real) + key[e + 1 :]
        n_real = t.ndim
    key = key + (slice(None),) * (t.ndim - n_real)
    axis, squeeze_axes, unsq, plan = 0, [], [], []
    kept = 0  # axes of the result so far (slices and Nones; integer-indexed axes vanish)
    for k in key:
        if k is None:
            unsq.append(kept)
            kept += 1
            continue
        d = t.shape[axis]
        if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            k = int(k)
            if d.is_num and not -d.value <= k < d.value:
                raise ShapeError(f"index {k} is out of range for axis {axis} of shape {list(t.shape)}")
            k = slice(k, k + 1 if k != -1 else None)
            squeeze_axes.append(len(plan))
        else:
            kept += 1
        if not isinstance(k, slice):
            raise ShapeError(f"unsupported index {k!r}: use ints, slices, None or ...; for tensors use gather()")
        plan.append(_slice_bounds(k, d, axis, t.shape))
        axis += 1
    out = _apply_slices(t, plan)
    for a in sorted(squeeze_axes, reverse=True):
        out = out.with_view(out.view.remove_dim(a))
    for a in unsq:
        out = unsqueeze(out, a)
    return out


def _apply_slices(t: GraphTensor, plan: list[tuple[Expression, Expression, int]]) -> GraphTensor:
    if all(start is ZERO and step == 1 for start, _, step in plan):
        dims = tuple(n for _, n, _ in plan)
        return t.with_view(ShapeTracker(dims, t.view.strides))
    new_dims = [n for _, n, _ in plan]
    inner = flat_strides(t.shape)
    idx = ZERO
    for (start, _, step), i, s in zip(plan, unflatten_index(new_dims), inner, strict=True):
        idx = idx + (start + i * step) * s
    return gather_view(t, new_dims, idx)


def pad(t: GraphTensor, widths, value: float = 0.0) -> GraphTensor:
    """np.pad(constant): widths is ((before, after), ...) per axis, or one (before, after) for all."""
    widths = _pad_widths(t, widths)
    if len(widths) != t.ndim:
        raise ShapeError(f"pad: {len(widths)} (before, after) pairs given for a tensor of rank {t.ndim}")
    for a, b in widths:
        if (a.is_num and a.value < 0) or (b.is_num and b.value < 0):
            raise ShapeError(f"pad: negative widths {widths}; slice the tensor to crop it")
    out_dims = tuple(d + a + b for d, (a, b) in zip(t.shape, widths, strict=True))
    g = t.graph
    dest = g.full(out_dims, value, t.dtype)
    inner = flat_strides(out_dims)
    idx_expr = ZERO
    for i, (a, _), s in zip(unflatten_index(t.shape), widths, inner, strict=True):
        idx_expr = idx_expr + (i + a) * s
    return scatter_flat(dest, g.iota(idx_expr, t.shape), t)


def _pad_widths(t: GraphTensor, widths) -> list[tuple[Expression, Expression]]:
    def width(w):
        return isinstance(w, (int, str, Expression, np.integer)) and not isinstance(w, bool)

    bad = ShapeError(f"pad: widths must be an int, a (before, after) pair or one pair per axis, got {widths!r}")
    if width(widths):
        widths = [(widths, widths)] * t.ndim
    elif isinstance(widths, (tuple, list)) and len(widths) == 2 and all(width(w) for w in widths):
        widths = [tuple(widths)] * t.ndim
    if not isinstance(widths, (tuple, list)):
        raise bad
    out = []
    for p in widths:
        if not (isinstance(p, (tuple, list)) and len(p) == 2 and all(width(w) for w in p)):
            raise bad
        out.append((expr(p[0]), expr(p[1])))
    return out


def scatter_flat(dest: GraphTensor, idx: GraphTensor, src: GraphTensor) -> GraphTensor:
    """Scatter op: copy of dest's view with element idx[j] (flat) replaced by src[j]."""
    if src.dtype != dest.dtype:
        src = src.cast(dest.dtype)
    if src.shape != idx.shape:
        src = expand(src, *idx.shape)
    d, i, s = dest.view, idx.view, src.view
    op = Scatter(d.dims, d.strides, i.dims, i.strides, s.strides)
    return dest.graph.node(op, [dest, idx, src], d.dims)
