"""Hugging Face's rotary embedding `q * cos + rotate_half(q) * sin` (apply_rotary_pos_emb, in a
16-bit model's dtype) translated as luminal.nn.rope spells it: x rotated in f32 and rounded once,
`dt(xf * cos + rot(xf) * (sin * sign))` with xf = f32(x), rot(xf) its halves swapped (a view) and
sign = -1 on the first half -- the form the CUDA backend's rope rules match (kernels/attention.egg,
`attn-rope` / `paged-rope`: q rotated as the attention kernel loads it, k's rotary inside the cache
write), instead of three bf16-rounded ops HF's own spelling leaves as a kernel of their own.

Pattern (FX producers of an `add.Tensor` node, alpha 1): add(mul(X, C), mul(R, S)) (either operand
order of each mul) with R = cat([neg(X[..., h:]), X[..., :h]], -1), X of a 16-bit float dtype whose
last axis is 2h, C and S of X's dtype broadcasting to X's shape (the output's). cos / sin that are a
16-bit cast of an f32 tensor (HF's `.to(x.dtype)` of its f32 tables) are read at f32.

Numerics: eager rounds q*cos, rot(q)*sin and their sum (and cos, sin) to the 16-bit dtype; this
computes the same function in f32 and rounds once: within docs/numerics.md's 16-bit tolerance of
eager and closer to the exact rotation (Inductor fuses the same chain in f32 too).
"""

from __future__ import annotations

import torch

import luminal as lm
from luminal.dtype import DType
from luminal.shape.expr import z

aten = torch.ops.aten


def _meta(n):
    return n.meta.get("val", n.meta.get("example_value")) if isinstance(n, torch.fx.Node) else None


def _slice(n):
    """(base, dim, start, end) of a unit-step slice node, else None."""
    if not (isinstance(n, torch.fx.Node) and n.target is aten.slice.Tensor):
        return None
    args = list(n.args) + [0, None, None, 1][len(n.args) - 1 :]
    base, d, start, end, step = args[:5]
    return (base, d, start, end) if step == 1 else None


def _rotate_half_of(r):
    """X when `r` is cat([neg(X[..., h:]), X[..., :h]], -1) with X's last axis 2h, else None."""
    if not (isinstance(r, torch.fx.Node) and r.target is aten.cat.default and len(r.args[0]) == 2):
        return None
    m = _meta(r)
    last = m.ndim - 1 if m is not None else None
    dim = r.args[1] if len(r.args) > 1 else 0
    if m is None or dim not in (-1, last):
        return None
    a, b = r.args[0]
    if not (isinstance(a, torch.fx.Node) and a.target is aten.neg.default):
        return None
    hi, lo = _slice(a.args[0]), _slice(b)
    if hi is None or lo is None or hi[0] is not lo[0]:
        return None
    x = hi[0]
    xm = _meta(x)
    if xm is None or xm.ndim != m.ndim or hi[1] not in (-1, last) or lo[1] not in (-1, last):
        return None
    n = xm.shape[-1]
    if not isinstance(n, int) or n % 2:
        return None
    h = n // 2
    big = lambda e: e is None or (isinstance(e, int) and e >= n)  # noqa: E731
    return x if hi[2] == h and big(hi[3]) and lo[2] in (0, None) and lo[3] == h else None


def _operands(m, x=None):
    """(the X operand, the other) of a mul node: X given, or the rotate_half operand."""
    if not (isinstance(m, torch.fx.Node) and m.target is aten.mul.Tensor and len(m.args) == 2):
        return None
    a, b = m.args
    for p, q in ((a, b), (b, a)):
        if (x is not None and p is x) or (x is None and _rotate_half_of(p) is not None):
            return p, q
    return None


def _f32(c, n):
    """The translated table `n` at f32: its f32 source when n is a 16-bit cast of an f32 tensor."""
    if isinstance(n, torch.fx.Node) and n.target is aten._to_copy.default and set(n.kwargs) <= {"dtype"}:
        src = _meta(n.args[0])
        if src is not None and src.dtype == torch.float32:
            n = n.args[0]
    t = c.value_of(n)
    return t.cast(DType.f32) if isinstance(t, lm.GraphTensor) else None


def rotary(c):
    """The rotation in f32 (see the module docstring), or None when c.node is not HF's rotary add."""
    node = c.node
    if len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return None
    for m1, m2 in (node.args, node.args[::-1]):
        rs = _operands(m2)
        if rs is None:
            continue
        x = _rotate_half_of(rs[0])
        xc = _operands(m1, x)
        if xc is None:
            continue
        xm, om = _meta(x), _meta(node)
        if xm.dtype not in (torch.bfloat16, torch.float16) or om.dtype != xm.dtype or om.shape != xm.shape:
            return None
        if any(_meta(t) is None or _meta(t).dtype != xm.dtype for t in (xc[1], rs[1])):
            return None
        xt = c.value_of(x)
        cos, sin = _f32(c, xc[1]), _f32(c, rs[1])
        if not isinstance(xt, lm.GraphTensor) or cos is None or sin is None:
            return None
        *lead, d = xt.shape
        h = d.value // 2
        xf = xt.cast(DType.f32)
        rot = xf.reshape(*lead, 2, h)[..., ::-1, :].reshape(*lead, d)  # halves swapped: a view
        sign = c.graph.iota((z // h) * 2 - 1, (d,)).cast(DType.f32)  # -1 then +1
        return (xf * cos + rot * (sin * sign)).cast(c.dtype)
    return None
