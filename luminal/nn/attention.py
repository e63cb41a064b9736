"""Grouped-query attention over a fixed-capacity KV cache, with causal and sliding-window masks.

KV-cache mechanism (docs/models.md): each layer's cache is a pair of persistent inputs
`cache.{i}.k` / `cache.{i}.v` of shape (n_kv, capacity, head_dim). A step with `s` new tokens at
past length `p` scatters the new rows into positions p .. p+s-1 and outputs the updated cache
under the same name; attention reads only that updated tensor (its first p+s rows), so the input
buffer's single consumer is the scatter and a backend may update it in place. The generation loop
binds each output back to its input before the next step.

Paged cache (`KVCache(..., paged=True)`, docs/attention.md): the cache is a pool of `capacity` slots
(page size 1) shared by several sequences; the step's PagedKV inputs say which sequence each new
token belongs to, its position there, and each sequence's slots in order (its page table), so one
step can decode B sequences of different lengths (or prefill several). The new rows go to
slot table[seq, pos]; query i attends to the slots table[seq_i, 0 .. pos_i].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import luminal as lm
from luminal.errors import ShapeError
from luminal.frontend.indexing import gather_flat
from luminal.graph import Graph
from luminal.nn.check import block_name, expect
from luminal.nn.linear import Linear
from luminal.nn.norm import RMSNorm
from luminal.shape.expr import ZERO, Expression, ge, lt, z
from luminal.tensor import GraphTensor


@dataclass(frozen=True)
class PagedKV:
    """One step's page-table inputs, shared by every layer: `table` (b, pages) i32 holds sequence
    b's slots in token order (entries past a sequence's length are any valid slot, e.g. 0), `seq`
    (s,) i32 the sequence of each new token, `pos` (s,) i32 its position in that sequence."""

    table: GraphTensor
    seq: GraphTensor
    pos: GraphTensor

    @staticmethod
    def inputs(g: Graph, prefix: str = "kv") -> PagedKV:
        """The graph inputs `{prefix}.table`, `{prefix}.seq`, `{prefix}.pos` (dims b, pages, s)."""
        return PagedKV(g.tensor(f"{prefix}.table", ("b", "pages"), lm.i32), g.tensor(f"{prefix}.seq", ("s",), lm.i32),
                       g.tensor(f"{prefix}.pos", ("s",), lm.i32))  # fmt: skip

    def rows(self) -> GraphTensor:
        """(s, pages) i32: the slots of each new token's sequence."""
        return self.table.gather(self.seq, axis=0)

    def mask(self, window: int | None = None) -> GraphTensor:
        """(s, pages) bool: query i sees key j when j <= pos_i (and j > pos_i - W with a window)."""
        j = self.table.graph.arange(self.table.shape[1]).unsqueeze(0)  # (1, pages)
        pos = self.pos.unsqueeze(1)  # (s, 1)
        keep = j <= pos
        return keep & (j > pos - window) if window is not None else keep


@dataclass(frozen=True)
class KVCache:
    """Names, shape and dtype of one layer's cache (the model's dtype: k and v are stored as the
    projections produce them); `update` scatters new rows and returns the live part."""

    name: str
    n_kv: int
    capacity: int
    head_dim: int
    dtype: object = lm.f32
    paged: bool = False  # a pool of `capacity` slots shared by sequences (update_paged, PagedKV)

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

    def update_paged(self, g: Graph, k: GraphTensor, v: GraphTensor, kv: PagedKV) -> tuple[GraphTensor, GraphTensor]:
        """Paged: k, v (n_kv, s, hd) new rows go to slots table[seq, pos]. Returns every query's keys
        and values through its page table: (n_kv, s, pages, hd) each."""
        if not self.paged:
            raise ShapeError(f"KVCache {self.name!r}: update_paged needs KVCache(..., paged=True)")
        k_cache, v_cache = self.state(g)
        rows = kv.rows()  # (s, pages)
        slot = rows.take_along_axis(kv.pos.unsqueeze(1), 1).squeeze(1)  # (s,)
        k_all = k_cache.scatter(slot, k, axis=1).output(f"{self.name}.k")
        v_all = v_cache.scatter(slot, v, axis=1).output(f"{self.name}.v")
        return paged_read(k_all, rows), paged_read(v_all, rows)


def paged_read(cache: GraphTensor, rows: GraphTensor) -> GraphTensor:
    """cache (n_kv, slots, hd) read at the slots `rows` (s, pages) -> (n_kv, s, pages, hd): one Gather
    whose flat index is head * slots * hd + slot * hd + d (rows hold valid slots: no negative wrap).
    The fused paged kernel reads the pool through `rows` instead (kernels/attention.egg, paged rules)."""
    g = cache.graph
    n_kv, slots, hd = (int(d) for d in cache.shape)  # literals: the pool has a fixed size
    s, pages = rows.shape
    shape = (n_kv, s, pages, hd)
    head = g.iota(z * (slots * hd), (n_kv,)).reshape(n_kv, 1, 1, 1)
    slot = (rows * hd).unsqueeze(0).unsqueeze(-1)  # (1, s, pages, 1)
    return gather_flat(cache, (head + slot).expand(*shape) + g.iota(z, (hd,)))


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


def attend_paged(q: GraphTensor, k: GraphTensor, v: GraphTensor, mask: GraphTensor | None, scale: float) -> GraphTensor:
    """attend() where every query has its own keys (a paged cache): q (n_kv, groups, s, hd); k, v
    (n_kv, s, pages, hd); mask (s, pages) bool. Returns (n_kv, groups, s, hd). The products are the
    same Mul -> SumReduce pairs a matmul spells, with the reduced axis last."""
    k, v = k.unsqueeze(1), v.unsqueeze(1)  # (n_kv, 1, s, pages, hd)
    scores = (q.unsqueeze(3) * k).sum(-1).cast(lm.f32) * scale  # (n_kv, groups, s, pages)
    if mask is not None:
        scores = lm.where(mask, scores, -math.inf)
    p = scores.softmax(-1).cast(v.dtype)
    return (p.unsqueeze(3) * v.transpose(-1, -2)).sum(-1)  # (n_kv, groups, s, hd)


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

    def __call__(self, x: GraphTensor, rope=None, past: Expression = ZERO, paged: PagedKV | None = None) -> GraphTensor:
        """x (s, dim) new tokens at past length `past`; with a paged cache, `paged` says where they go."""
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
        q = q.reshape(s, self.n_kv, groups, self.head_dim).permute(1, 2, 0, 3)  # (n_kv, groups, s, hd)
        if self.cache is not None and self.cache.paged:
            if paged is None:
                raise ShapeError(f"Attention with paged cache {self.cache.name!r}: pass the step's PagedKV inputs")
            k, v = self.cache.update_paged(g, k, v, paged)  # (n_kv, s, pages, hd)
            mask = paged.mask(self.window) if self.causal else None
            out = attend_paged(q, k, v, mask, self.scale)  # (n_kv, groups, s, hd)
            return self.o(out.permute(2, 0, 1, 3).reshape(s, self.n_heads * self.head_dim))
        if self.cache is not None:
            k, v = self.cache.update(g, k, v, past)  # (n_kv, p+s, hd)
        mask = (
            causal_mask(g, s, past if self.cache is not None else ZERO, k.shape[1], self.window)
            if self.causal
            else None
        )
        out = attend(q, k, v, mask, self.scale)  # (n_kv, groups, s, hd)
        return self.o(out.permute(2, 0, 1, 3).reshape(s, self.n_heads * self.head_dim))  # (s, dim)
