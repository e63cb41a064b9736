"""Movement ATen ops: view / reshape, permute / transpose, expand, squeeze / unsqueeze, slice /
select / narrow, cat / stack / split / unbind, pad, repeat, flip, tril / triu. Sizes come from
torch's metadata for the node (already symbolic), so a view never re-derives a shape."""

from __future__ import annotations

import luminal as lm
from luminal.frontend.movement import flat_strides, gather_view, unflatten_index
from luminal.shape.expr import ZERO, Expression, expr
from luminal.shape.tracker import ShapeTracker
from luminal.torch.registry import aten


@aten("view.default", note="`reshape` to torch's size")
def view(c, x, size):
    return x.reshape(*c.shape)


@aten("permute.default", note="`permute` (a view)")
def permute(c, x, dims):
    return x.permute(*dims) if x.ndim else x


@aten("expand.default", note="`expand` (stride-0 broadcast)")
def expand(c, x, size, implicit=False):
    return x.expand(*c.shape)


@aten("unsqueeze.default", note="`unsqueeze`")
def unsqueeze(c, x, dim):
    return x.unsqueeze(dim)


@aten("squeeze.dims", note="`squeeze` of the listed size-1 axes")
def squeeze(c, x, dim=None):
    if x.ndim == 0:
        return x
    dims = range(x.ndim) if dim is None else [dim] if isinstance(dim, int) else dim
    axes = [d % x.ndim for d in dims if x.shape[d] == 1]
    return x.squeeze(axes) if axes else x


def _negative(e: Expression) -> bool:
    """A symbolic index that is negative for every size (e.g. `-s`, `1 - 2*s`): counts from the end."""
    names = e.dims()
    return int(e.evaluate(dict.fromkeys(names, 1))) < 0 and int(e.evaluate(dict.fromkeys(names, 1 << 20))) < 0


def _position(d: Expression, i) -> Expression | int:
    """torch's start/index on an axis of length d, normalized: negatives count from the end."""
    if i is None:
        return 0
    if isinstance(i, int):
        if i < 0:
            return max(i + d.value, 0) if d.is_num else d + i
        return min(i, d.value) if d.is_num else i
    return d + i if _negative(i) else i


def _take(c, x, dim: int, start, step: int, dims):
    """x restricted on `dim` to start, start+step, ... (len dims[dim]): a view or one Gather."""
    start = expr(start)
    if start is ZERO and step == 1:
        return x.with_view(ShapeTracker(tuple(dims), x.view.strides))
    inner = flat_strides(x.shape)
    idx = ZERO
    for k, (i, st) in enumerate(zip(unflatten_index(dims), inner, strict=True)):
        idx = idx + (start + i * step if k == dim else i) * st
    return gather_view(x, dims, idx)


@aten("slice.Tensor", note="`x[start:end:step]` on one axis (symbolic and negative bounds allowed)")
def slice_(c, x, dim=0, start=None, end=None, step=1):
    dim %= x.ndim
    return _take(c, x, dim, _position(x.shape[dim], start), step, c.shape)


@aten("select.int", note="`x[..., index, ...]`")
def select(c, x, dim, index):
    dim %= x.ndim
    y = _take(c, x, dim, _position(x.shape[dim], index), 1, (*c.shape[:dim], 1, *c.shape[dim:]))
    return y.squeeze(dim)


@aten("cat.default", note="`lm.concat` (inputs promoted to one dtype; empty 1-D inputs skipped)")
def cat(c, tensors, dim=0):
    ts = [c.tensor(t) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0 and len(c.shape) != 1)]
    if len(ts) == 1:
        return ts[0]
    return lm.concat(ts, dim)


@aten("split_with_sizes.default", note="consecutive slices along `dim`")
def split(c, x, split_size, dim=0):
    dim %= x.ndim
    out, start = [], ZERO
    for k in range(len(c.meta)):
        dims = c.shape_of(k)
        out.append(_take(c, x, dim, start, 1, dims))
        start = start + dims[dim]
    return tuple(out)


@aten("constant_pad_nd.default", note="`pad` (torch order: last axis first; negative widths crop)")
def constant_pad_nd(c, x, pad, value=0):
    widths = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        widths[x.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    if any(isinstance(w, int) and w < 0 for pair in widths for w in pair):
        key = tuple(slice(-b if b < 0 else None, a if a < 0 else None) for b, a in widths)
        x = x[key]
        widths = [(max(b, 0), max(a, 0)) for b, a in widths]
    return x.pad(widths, value) if any(w != (0, 0) for w in widths) else x


@aten("repeat.default", note="`repeat` (np.tile: a view)")
def repeat(c, x, repeats):
    return x.repeat(*repeats)


@aten("flip.default", note="`x[::-1]` on each listed axis (a gather)")
def flip(c, x, dims):
    key = [slice(None)] * x.ndim
    for d in dims:
        key[d % x.ndim] = slice(None, None, -1)
    return x[tuple(key)]
