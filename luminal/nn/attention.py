"""Grouped-query attention over a fixed-capacity KV cache, with causal and sliding-window masks.

KV-cache mechanism (docs/models.md): each layer's cache is a pair of persistent inputs
`cache.{i}.k` / `cache.{i}.v` of shape (n_kv, capacity, head_dim). A step with `s` new tokens at
past length `p` scatters the new rows into positions p .. p+s-1 and outputs the updated cache
under the same name; attention reads only that updated tensor (its first p+s rows), so the input
buffer's single consumer is the scatter and a backend may update it in place. The generation loop
binds each output back to its input before the next step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import luminal as lm
from luminal.graph import Graph
from luminal.nn.check import block_name, expect
from luminal.nn.linear import Linear
from luminal.nn.norm import RMSNorm
from luminal.shape.expr import ZERO, Expression, ge, lt, z
from luminal.tensor import GraphTensor


@dataclass(frozen=True)
class KVCache:
    """Names, shape and dtype of one layer's cache (the model's dtype: k and v are stored as the
    projections produce them); `update` scatters new rows and returns the live part."""

    name: str
    n_kv: int
    capacity: int
    head_dim: int
    dtype: object = lm.f32

    def state(self, g: Graph) -> tuple[GraphTensor, GraphTensor]:
        shape = (self.n_kv, self.capacity, self.head_dim)
        k = g.tensor(f"{self.name}.k", shape, self.dtype).persist()
        return k, g.tensor(f"{self.name}.v", shape, self.dtype).persist()

    def update(self, g: Graph, k: GraphTensor, v: GraphTensor, past: Expression) -> tuple[GraphTensor, GraphTensor]:
        """k, v: (n_kv, s, hd) new rows. Returns the caches' first p+s rows: (n_kv, p+s, hd) each."""
        for t in (k, v):
            expect(t, f"KVCache {self.name!r}", f"new rows (n_kv={self.n_kv}, s, head_dim={self.head_dim})", 3,
                   {0: self.n_kv, 2: self.head_dim})  # fmt: skip
        k_cache, v_cache = self.state(g)
        new = k.shape[1]
        rows = g.iota(past + z, (new,))  # (s,) positions p .. p+s-1
        k_all = k_cache.scatter(rows, k, axis=1).output(f"{self.name}.k")
        v_all = v_cache.scatter(rows, v, axis=1).output(f"{self.name}.v")
        return k_all[:, : past + new], v_all[:, : past + new]


def causal_mask(
    g: Graph, new: Expression, past: Expression, keys: Expression, window: int | None = None
) -> GraphTensor:
    """(s, keys) bool: query i (at absolute position p+i) sees key j when j <= p+i, and, with a
    sliding window W, also j > p+i-W (the Hugging Face `sliding_window` convention)."""
    i, j = z // keys, z % keys
    keep = ge(past + i, j)
    if window is not None:
        keep = keep * lt(past + i - window, j)
    return g.iota(keep, (new, keys)).cast(lm.bool)


def attend(q: GraphTensor, k: GraphTensor, v: GraphTensor, mask: GraphTensor | None, scale: float) -> GraphTensor:
    """Scaled dot-product attention with GQA broadcasting, softmax in f32.
    q: (n_kv, groups, s, hd); k, v: (n_kv, t, hd); mask: (s, t) bool. Returns (n_kv, groups, s, hd)."""
    expect(q, "attend", "q as (n_kv, groups, s, head_dim)", 4)
    for t in (k, v):
        expect(t, "attend", f"k and v as (n_kv={q.shape[0]}, t, head_dim)", 3, {0: q.shape[0]})
    k, v = k.unsqueeze(1), v.unsqueeze(1)  # (n_kv, 1, t, hd)
    scores = (q @ k.transpose(-1, -2)).cast(lm.f32) * scale  # (n_kv, groups, s, t)
    if mask is not None:
        scores = lm.where(mask, scores, -math.inf)
    return scores.softmax(-1).cast(v.dtype) @ v


class Attention:
    """Self-attention block: q/k/v projections (optional biases, optional per-head q/k RMSNorm as in
    Qwen3 and Gemma 3), rotary embedding, KV-cache update, masked GQA attention, output projection.
    Without a cache it attends over the s new tokens only; `causal=False` drops the mask (encoders)."""

    def __init__(
        self, g: Graph, name: str, dim: int, n_heads: int, n_kv: int, head_dim: int, cache: KVCache | None,
        bias: tuple[bool, bool, bool, bool] = (False, False, False, False), qk_norm: float | None = None,
        qk_norm_offset: bool = False, scale: float | None = None, window: int | None = None, out_name: str = "o_proj",
        causal: bool = True, dtype: object = lm.f32,
    ):  # fmt: skip
        """`bias` says which of the q, k, v, out projections have one; `qk_norm` is the q/k RMSNorm eps;
        `dtype` is the weights' (and so the cache's) dtype."""
        self.n_heads, self.n_kv, self.head_dim = n_heads, n_kv, head_dim
        self.cache, self.window, self.causal = cache, window, causal
        self.scale = head_dim**-0.5 if scale is None else scale
        self.q = Linear(g, f"{name}.q_proj", dim, n_heads * head_dim, bias[0], dtype)
        self.k = Linear(g, f"{name}.k_proj", dim, n_kv * head_dim, bias[1], dtype)
        self.v = Linear(g, f"{name}.v_proj", dim, n_kv * head_dim, bias[2], dtype)
        self.o = Linear(g, f"{name}.{out_name}", n_heads * head_dim, dim, bias[3], dtype)
        self.q_norm = self.k_norm = None
        if qk_norm is not None:
            self.q_norm = RMSNorm(g, f"{name}.q_norm", head_dim, qk_norm, qk_norm_offset, dtype)
            self.k_norm = RMSNorm(g, f"{name}.k_norm", head_dim, qk_norm, qk_norm_offset, dtype)

    def __call__(self, x: GraphTensor, rope=None, past: Expression = ZERO) -> GraphTensor:
        dim = self.q.d_in
        expect(x, block_name("Attention", self.q.weight).replace(".q_proj", ""), f"(s, dim={dim}) rows", 2, {1: dim})
        g, s = x.graph, x.shape[0]
        groups = self.n_heads // self.n_kv
        q = self.q(x).reshape(s, self.n_heads, self.head_dim)  # (s, n_heads, hd)
        k = self.k(x).reshape(s, self.n_kv, self.head_dim)  # (s, n_kv, hd)
        v = self.v(x).reshape(s, self.n_kv, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = rope(q), rope(k)
        k, v = k.permute(1, 0, 2), v.permute(1, 0, 2)  # (n_kv, s, hd)
        if self.cache is not None:
            k, v = self.cache.update(g, k, v, past)  # (n_kv, p+s, hd)
        q = q.reshape(s, self.n_kv, groups, self.head_dim).permute(1, 2, 0, 3)  # (n_kv, groups, s, hd)
        mask = (
            causal_mask(g, s, past if self.cache is not None else ZERO, k.shape[1], self.window)
            if self.causal
            else None
        )
        out = attend(q, k, v, mask, self.scale)  # (n_kv, groups, s, hd)
        return self.o(out.permute(2, 0, 1, 3).reshape(s, self.n_heads * self.head_dim))  # (s, dim)
