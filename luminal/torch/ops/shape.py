"""Movement ATen ops: view / reshape, permute / transpose, expand, squeeze / unsqueeze, slice /
select / narrow, cat / stack / split / unbind, pad, repeat, flip, tril / triu. Sizes come from
torch's metadata for the node (already symbolic), so a view never re-derives a shape."""

from __future__ import annotations

import luminal as lm
from luminal.shape.expr import Expression
from luminal.torch.registry import aten

INT64_MAX = 2**63 - 1


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


def _slice_start(d: Expression, start):
    """torch's slice start, normalized: negatives count from the end, clamped to [0, d]."""
    if start is None:
        return 0
    if isinstance(start, int):
        if start < 0:
            return max(start + d.value, 0) if d.is_num else d + start
        return min(start, d.value) if d.is_num else start
    return start


@aten("slice.Tensor", note="`x[start:end:step]` on one axis (symbolic bounds allowed)")
def slice_(c, x, dim=0, start=None, end=None, step=1):
    dim %= x.ndim
    d = x.shape[dim]
    n = c.shape[dim]  # the length torch computed, symbolic or not
    s0 = _slice_start(d, start)
    if end is not None and isinstance(end, int) and end >= INT64_MAX:
        end = None
    stop = (s0 + (n - 1) * step + 1) if not (isinstance(n, Expression) and n.is_num and n.value == 0) else s0
    key = [slice(None)] * x.ndim
    key[dim] = slice(s0, stop, step)
    return c.fix(x[tuple(key)], c.shape)


@aten("select.int", note="`x[..., index, ...]`")
def select(c, x, dim, index):
    dim %= x.ndim
    if isinstance(index, int) and index < 0:
        index = index + x.shape[dim] if not x.shape[dim].is_num else index + x.shape[dim].value
    key = [slice(None)] * x.ndim
    key[dim] = slice(index, index + 1)
    y = x[tuple(key)]
    return c.fix(y, (*c.shape[:dim], 1, *c.shape[dim:])).squeeze(dim)


@aten("cat.default", note="`lm.concat` (inputs promoted to one dtype; empty 1-D inputs skipped)")
def cat(c, tensors, dim=0):
    ts = [c.tensor(t) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0 and len(c.shape) != 1)]
    if len(ts) == 1:
        return ts[0]
    return lm.concat(ts, dim)


def _split_sizes(c, x, dim):
    return [c.shape_of(i)[dim % x.ndim] for i in range(len(c.meta))]


@aten("split_with_sizes.default", note="consecutive slices along `dim`")
def split(c, x, split_size, dim=0):
    dim %= x.ndim
    out, start = [], 0
    for n in _split_sizes(c, x, dim):
        key = [slice(None)] * x.ndim
        key[dim] = slice(start, start + n)
        y = x[tuple(key)]
        out.append(c.fix(y, (*y.shape[:dim], n, *y.shape[dim + 1 :])))
        start = start + n
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
