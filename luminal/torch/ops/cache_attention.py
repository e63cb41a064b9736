"""Cache attention: SDPA of the new queries against a whole static KV cache (a Hugging Face
`StaticCache`) under the position mask `key j visible to query i iff j <= pos[i]`, translated to the
graph luminal.nn.attention builds for its paged KV cache (PagedKV over one sequence: page table
0 .. capacity-1, the positions from the mask), so the CUDA backend's paged attention rules
(kernels/attention.egg, "paged") fuse it into one KernelPagedAttention that scans only the visible
keys, instead of ~15 launches over the cache's full capacity.

What is recognized, from the FX producers of SDPA's arguments (anything else returns None and the
generic translation in attention.py runs):

* mask: `le(J, P)` (boolean, or additive: `where(le(J, P), 0, -inf)`, or SDPA's own conversions
  for the kernels that a CUDA trace calls, passed as their `attn_bias`: `where(logical_not(le(J,
  P)), -inf, zeros)` for the efficient kernel, `where(le(J, P), 0, -65504)` for cuDNN), broadcast
  by unsqueeze / expand / full slices, with
  J = `arange(0, capacity)` along the key axis (maybe `+ 0`) and P an integer vector of the s query
  positions along the query axis;
* k, v: (1, n_kv, capacity, head_dim), maybe repeated to the query heads by `repeat_kv`
  (unsqueeze, expand, clone, view: peeled to the cache itself), batch 1, no causal flag.

Equivalence: torch's SDPA with that mask is softmax over the keys j <= P[i] of each query; the
paged graph computes exactly that from the same cache tensor (rows = 0 .. capacity-1). A finite
"minus infinity" (cuDNN's -65504, any value <= -65504) is taken as -inf: its keys' weights are
exp(score - 65504 - max), exactly 0 in f32 while the scores of one row differ by less than ~65400
(a softmax whose logits spread that far is already one-hot). Domain (what
the paged kernel assumes, and what a StaticCache guarantees): 0 <= P[i] < capacity, so every row
sees key 0 and no empty-row fix-up is needed.

The rules read the query axis's strides, which a literal 1 (a decode step) collapses: there the
query length is the dim `luminal_query_rows`, fixed to 1 the same way (the Program supplies it).
The rules need a literal pool size; Dynamo makes the cache's length a dim, so the translation
specializes it to the example's value and records the range [capacity, capacity]: a call with a
cache of another capacity is an InputError from the Program (never a silent wrong answer).
"""

from __future__ import annotations

import torch

import luminal as lm
from luminal.nn.attention import PagedKV, attend_paged, paged_read
from luminal.shape.expr import var, z
from luminal.shape.tracker import ShapeTracker

aten = torch.ops.aten
QUERY_ROWS = "luminal_query_rows"  # the decode step's query length as a dim fixed to 1 (see cache_attention)
_VIEWS = (aten.unsqueeze.default, aten.expand.default, aten.alias.default)


def _peel(n):
    """n without broadcasting views (unsqueeze, expand, alias, full slices)."""
    while isinstance(n, torch.fx.Node):
        if n.target in _VIEWS:
            n = n.args[0]
        elif n.target is aten.slice.Tensor and _full_slice(n):
            n = n.args[0]
        elif n.target is aten.slice.Tensor and _unpadded(n) is not None:
            n = _unpadded(n)
        else:
            break
    return n


def _unpadded(n):
    """x when n is `pad(x, (0, k))[..., :x.shape[-1]]` (the efficient kernel's bias alignment), else None."""
    x, dim = n.args[0], n.args[1] if len(n.args) > 1 else 0
    start, end = (n.args[2] if len(n.args) > 2 else 0), (n.args[3] if len(n.args) > 3 else None)
    if not (isinstance(x, torch.fx.Node) and x.target is aten.constant_pad_nd.default and start in (0, None)):
        return None
    pad, inner = x.args[1], x.args[0]
    m = _meta(inner)
    if m is None or dim not in (-1, m.ndim - 1) or len(pad) != 2 or pad[0] != 0:
        return None
    return inner if _hint(end) == _hint(m.shape[-1]) else None


def _full_slice(n) -> bool:
    start = n.args[2] if len(n.args) > 2 else 0
    end = n.args[3] if len(n.args) > 3 else None
    step = n.args[4] if len(n.args) > 4 else 1
    return step == 1 and start in (0, None) and (end is None or (isinstance(end, int) and end >= 2**62))


def _meta(n):
    return n.meta.get("val", n.meta.get("example_value")) if isinstance(n, torch.fx.Node) else None


def _constant(n) -> float | None:
    """The value of n when it is a constant: a number, a scalar tensor, or a tensor filled with it."""
    if isinstance(n, (int, float)):
        return float(n)
    if not isinstance(n, torch.fx.Node):
        return None
    if n.target is aten.scalar_tensor.default:
        return _constant(n.args[0])
    if n.target in (aten.full.default, aten.full_like.default):
        return _constant(n.args[1])
    if n.target in (aten.zeros.default, aten.zeros_like.default):
        return 0.0
    return None


def _is_value(n, want: float) -> bool:
    """n is the constant `want`."""
    return _constant(n) == want


_NOT = (aten.logical_not.default, aten.bitwise_not.default)
_MASKED = -65504.0  # the largest "minus infinity" a mask may use (cuDNN's; f16's lowest finite value)


def _is_masked(n) -> bool:
    """n is a constant that masks a key out: -inf, or a finite value <= -65504 (module docstring)."""
    c = _constant(n)
    return c is not None and c <= _MASKED


def _mask_node(node):
    """The FX node of SDPA's mask: the composite's `attn_mask`, the efficient / cuDNN kernels'
    `attn_bias` (what a CUDA trace dispatches to), the CPU flash kernel's `attn_mask`."""
    if node.target is aten.scaled_dot_product_attention.default:
        return node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None)
    if node.target in (aten._scaled_dot_product_efficient_attention.default,
                       aten._scaled_dot_product_cudnn_attention.default):  # fmt: skip
        return node.kwargs.get("attn_bias", node.args[3] if len(node.args) > 3 else None)
    return node.kwargs.get("attn_mask")


def _keys_iota(n, cap) -> bool:
    """n is arange(0, cap) (maybe `+ 0`)."""
    n = _peel(n)
    if isinstance(n, torch.fx.Node) and n.target is aten.add.Tensor and _is_value(n.args[1], 0.0):
        n = n.args[0]
    if not (isinstance(n, torch.fx.Node) and n.target is aten.arange.start_step):
        return False
    start, end = n.args[0], n.args[1]
    step = n.args[2] if len(n.args) > 2 else n.kwargs.get("step", 1)
    return start == 0 and step == 1 and _hint(end) == cap


def _hint(x) -> int | None:
    """The example's value of a size (an int, or a SymInt's hint)."""
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        h = x.node.hint
        return int(h) if h is not None else None
    if isinstance(x, torch.fx.Node):
        return _hint(_meta(x))
    return None


def _positions(mask, s: int, cap: int):
    """The FX node of the (s,) integer positions P when `mask` is le(arange(cap), P), else None."""
    if not isinstance(mask, torch.fx.Node):
        return None
    cond = _peel(mask)
    if isinstance(cond, torch.fx.Node) and cond.target is aten.where.self:  # additive
        keep, a, b = cond.args
        if _is_value(a, 0.0) and _is_masked(b):  # where(keep, 0, -inf), cuDNN's where(keep, 0, -65504)
            cond = keep
        elif _is_masked(a) and _is_value(b, 0.0):  # where(~keep, -inf, 0): SDPA's own
            keep = _peel(keep)
            if not (isinstance(keep, torch.fx.Node) and keep.target in _NOT):
                return None
            cond = keep.args[0]
        else:
            return None
    cond = _peel(cond)
    if not (isinstance(cond, torch.fx.Node) and cond.target is aten.le.Tensor):
        return None
    jn, pn = cond.args
    jm, pm = _meta(jn), _meta(pn)
    if jm is None or pm is None or jm.ndim < 2 or pm.ndim < 2:
        return None
    # J varies along the last (key) axis only, P along the query axis only
    if any(_hint(d) != 1 for d in jm.shape[:-1]) or any(
        _hint(d) != 1 for k, d in enumerate(pm.shape) if k != pm.ndim - 2
    ):
        return None
    if not _keys_iota(jn, cap):
        return None
    p = _peel(pn)
    m = _meta(p)
    if m is None or m.ndim != 1 or _hint(m.shape[0]) != s or m.dtype.is_floating_point or m.dtype == torch.bool:
        return None
    return p


def _cache(n, n_heads: int):
    """The (1, n_kv, cap, hd) cache node under repeat_kv's views, and n_kv."""
    m = _meta(n)
    base = n
    if isinstance(n, torch.fx.Node) and n.target is aten.view.default:
        c = n.args[0]
        if isinstance(c, torch.fx.Node) and c.target is aten.clone.default:
            c = c.args[0]
        e = c if isinstance(c, torch.fx.Node) and c.target is aten.expand.default else None
        if e is not None:
            u = e.args[0]
            while isinstance(u, torch.fx.Node) and u.target is aten.slice.Tensor and _full_slice(u):
                u = u.args[0]
            if isinstance(u, torch.fx.Node) and u.target is aten.unsqueeze.default and u.args[1] == 2:
                base = u.args[0]
    bm = _meta(base)
    if bm is None or bm.ndim != 4 or m is None:
        return None, 0
    n_kv = _hint(bm.shape[1])
    if (
        n_kv is None
        or n_heads % n_kv
        or _hint(bm.shape[2]) != _hint(m.shape[2])
        or _hint(bm.shape[3]) != _hint(m.shape[3])
    ):
        return None, 0
    if base is not n and _hint(m.shape[1]) != n_heads:  # repeat_kv's result has the query heads
        return None, 0
    return base, n_kv


def _one_row(c, t, dims: tuple):
    """t seen with the query axis spelled as `dims` (1 <-> luminal_query_rows, whose value is 1):
    a contiguous t keeps contiguous strides (equal at one row), so readers see a plain row-major
    tensor (the GEMV and attention rules match on row-major strides), not a strided view."""
    return t.with_view(ShapeTracker.new(dims)) if t.view.is_contiguous() else c.fix(t, dims)


def _literal(c, t, dims: tuple[int, ...]):
    """The contiguous tensor t seen with literal dims (the specialized capacity)."""
    return t.with_view(ShapeTracker.new(dims))


def cache_attention(c, q, k, v, mask, is_causal: bool, scale):
    """SDPA as paged attention over the static cache, or None (see the module docstring)."""
    node = c.node
    qn, kn, vn = node.args[:3]
    mn = _mask_node(node)
    qm = _meta(qn)
    if is_causal or mask is None or qm is None or qm.ndim != 4 or _hint(qm.shape[0]) != 1:
        return None
    heads, s, hd = (_hint(d) for d in qm.shape[1:])
    if heads is None or s is None or hd is None or not q.shape[2].is_num:
        return None
    kb, n_kv = _cache(kn, heads)
    vb, n_kv_v = _cache(vn, heads)
    if kb is None or vb is None or n_kv != n_kv_v:
        return None
    cap = _hint(_meta(kb).shape[2])
    if cap is None or _hint(_meta(vb).shape[2]) != cap or _hint(_meta(kb).shape[3]) != hd:
        return None
    pn = _positions(mn, s, cap)
    if pn is None:
        return None
    kt, vt, pos = c.value_of(kb), c.value_of(vb), c.value_of(pn)
    if not all(isinstance(t, lm.GraphTensor) for t in (kt, vt, pos)):
        return None
    if not (kt.view.is_contiguous() and vt.view.is_contiguous()):  # the pool is read row-major
        return None
    for d in (_meta(kb).shape[2], _meta(vb).shape[2]):  # the pool size the rules need: a literal
        e = c.expr(d)
        if not e.is_num:
            c.specialize(e, cap)
    g, groups = c.graph, heads // n_kv
    if s == 1:  # decode: the rules read the query axis's strides, which a literal 1 collapses
        rows_dim = var(QUERY_ROWS)
        c.specialize(rows_dim, 1)
        q, pos = _one_row(c, q, (1, heads, rows_dim, hd)), _one_row(c, pos, (rows_dim,))
    pool_k = _literal(c, kt, (1, n_kv, cap, hd)).reshape(n_kv, cap, hd)
    pool_v = _literal(c, vt, (1, n_kv, cap, hd)).reshape(n_kv, cap, hd)
    paged = PagedKV(g.iota(z, (1, cap)), g.iota(z * 0, (q.shape[2],)), pos.cast(lm.i32))
    rows = g.iota(z % cap, (q.shape[2], cap))  # (s, cap): slot j of query i is j (paged.rows(), one launch less)
    qg = q.reshape(n_kv, groups, q.shape[2], hd)  # head h = kv head h // groups (repeat_kv's order)
    out = attend_paged(qg, paged_read(pool_k, rows), paged_read(pool_v, rows), paged.mask(), scale)
    return _one_row(c, out.reshape(1, heads, q.shape[2], hd), (1, heads, s, hd))
