"""Movement ATen ops: view / reshape, permute / transpose, expand, squeeze / unsqueeze, slice /
select / narrow, cat / stack / split / unbind, pad, repeat, flip, tril / triu. Sizes come from
torch's metadata for the node (already symbolic), so a view never re-derives a shape."""

from __future__ import annotations

import luminal as lm
from luminal.frontend.movement import flat_strides, gather_view, unflatten_index
from luminal.shape.expr import ZERO, Expression, expr, z
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


@aten("cat.default", note="`lm.concat` (inputs promoted to one dtype; empty 1-D inputs skipped); "
     "blocks of one tensor (RoPE's `cat(-x2, x1)`, `cat(f, f)`) as a view times a sign")  # fmt: skip
def cat(c, tensors, dim=0):
    ts = [c.tensor(t) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0 and len(c.shape) != 1)]
    if len(ts) == 1:
        return ts[0]
    same = _blocks_of_one(c, dim % len(c.shape))
    return same if same is not None else lm.concat(ts, dim)


def _piece(n):
    """(sign, base node, start, end) of a cat input that is `[-]base[start:end]` on some axis (whole
    base: start = end = None), or None. Reads the FX producers: neg and unit-step slice only."""
    import torch

    sign = 1
    if isinstance(n, torch.fx.Node) and n.target is torch.ops.aten.neg.default:
        sign, n = -1, n.args[0]
    if not isinstance(n, torch.fx.Node):
        return None
    if n.target is torch.ops.aten.slice.Tensor:
        args = list(n.args) + [0, None, None, 1][len(n.args) - 1 :]
        base, d, start, end, step = args[:5]
        start = 0 if start is None else start
        if step != 1 or not isinstance(start, int) or not isinstance(end, int) or start < 0 or end < 0:
            return None
        return sign, _whole(base), d, start, end
    return sign, _whole(n), None, None, None


def _whole(n):
    """n without the full-axis slices `x[:, ...]` spells (so two pieces of x meet at one node)."""
    import torch

    while isinstance(n, torch.fx.Node) and n.target is torch.ops.aten.slice.Tensor and len(n.args) >= 4:
        base, d, start, end = n.args[:4]
        step = n.args[4] if len(n.args) > 4 else 1
        size = base.meta["val"].shape[d] if isinstance(base, torch.fx.Node) and "val" in base.meta else None
        full = isinstance(end, int) and (end >= 2**62 or (isinstance(size, int) and end >= size))
        if step != 1 or start not in (0, None) or not full:
            break
        n = base
    return n


def _blocks_of_one(c, dim: int):
    """`cat` whose inputs are equal-length blocks of one tensor x (each maybe negated), as a view:
    cat(-x[h:], x[:h]) (RoPE's rotate_half) = x with its halves swapped times [-1]*h + [1]*h, and
    cat(x, x) = x repeated (a stride-0 view). A concat is zeros plus one Scatter per piece (three
    launches each); this is one elementwise expression the fusion rules join with its consumers,
    as luminal/nn/rope.py writes it. None when the inputs are anything else."""
    pieces = [_piece(n) for n in c.node.args[0]]
    if len(pieces) != 2 or any(p is None for p in pieces) or pieces[0][1] is not pieces[1][1]:
        return None
    x = c.value_of(pieces[0][1])
    if not isinstance(x, lm.GraphTensor) or x.ndim != len(c.shape):
        return None
    n = x.shape[dim]
    whole = all(p[2] is None for p in pieces)
    if whole:  # cat(x, x): x repeated along dim
        y = x.unsqueeze(dim).expand(*x.shape[:dim], 2, *x.shape[dim:]).reshape(*c.shape)
    else:
        if any(p[2] is None or p[2] % x.ndim != dim for p in pieces) or not n.is_num or n.value % 2:
            return None
        h = n.value // 2
        spans = [(p[3], min(p[4], n.value)) for p in pieces]
        if spans == [(h, n.value), (0, h)]:  # halves swapped: a reversed view of (.., 2, h, ..)
            halves = x.reshape(*x.shape[:dim], 2, h, *x.shape[dim + 1 :])
            key = (slice(None),) * dim + (slice(None, None, -1),)
            y = halves[key].reshape(*x.shape)
        elif spans == [(0, h), (h, n.value)]:
            y = x
        else:
            return None
    signs = [p[0] for p in pieces]
    y = c.tensor(y)
    if signs == [1, 1]:
        return y
    if signs == [-1, -1]:
        return -y
    blk = y.shape[dim].value // 2 if y.shape[dim].is_num else None
    if blk is None:
        return None
    sign = c.graph.iota((z // blk) * 2 - 1 if signs[0] < 0 else 1 - (z // blk) * 2, (y.shape[dim],)).cast(y.dtype)
    for _ in range(y.ndim - dim - 1):
        sign = sign.unsqueeze(-1)
    return y * sign


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
