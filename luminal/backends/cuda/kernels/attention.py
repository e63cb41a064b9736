"""KernelAttention: fused scaled-dot-product attention (GQA, causal / sliding-window masks, logit
soft-capping) as one op of the CUDA backend, unioned by the rules of attention.egg into the e-class
of the pattern luminal/nn/attention.py produces (scores -> scale -> mask -> f32 softmax -> @ V).

Fields: n_kv kv heads, `groups` query heads per kv head, s query rows, t keys, head_dim; the views
through which it reads q (n_kv, groups, s, head_dim), k and v (n_kv, t, head_dim); the mask
(`causal`: query i sees key j <= past + i; `window` W > 0: and j > past + i - W); `scale` and
`softcap` (0: none; else scores become softcap * tanh(scores / softcap) after the scale); the
dtype of q, k, v and the output. Output: (n_kv, groups, s, head_dim), contiguous.

Numerics (docs/attention.md): scores, softmax and the P @ V sums in f32 from the stored inputs,
rounded once at the store (the bf16/f16 prefill path rounds P to the input dtype before the
tensor-core P @ V, as every flash kernel does). The reference below computes the same function in
f64: a fused plan is at least as accurate as the unfused one, which rounds the scores to the input
dtype before the softmax.

Launches (render): the decode path (split-KV flash-decoding in one launch, the last split of a row
block merging the others: attention_decode.py; its tickets are the op's zeroed words) runs when
s <= DECODE_ROWS, the prefill path otherwise (tensor-core flash attention for bf16/f16,
attention_prefill.py; for f32 the decode kernel without splitting). Each launch's grid is
gated on s (0 blocks when it is the other path's turn; a CUDA graph's one-block launch then
returns at once), and the decode grid does not depend on t, so a decode step's graph is never
patched as the context grows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from luminal.backends.cuda.kernel import Kernel, KernelOp, Launch, dim_decls, headers, name_code
from luminal.backends.cuda.kernels import attention_decode as dec
from luminal.backends.cuda.kernels import attention_prefill as pre
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir.op import EList, view
from luminal.shape.expr import Expression, lt, minimum, num, prod
from luminal.shape.tracker import linear_step

HEAD_DIMS = (64, 128, 256)
DTYPES = (DType.f32, DType.f16, DType.bf16)
DECODE_ROWS = 8  # query rows (per kv head and group) up to which the split-KV decode path runs


@dataclass(frozen=True)
class KernelAttention(KernelOp):
    n_kv: Expression
    groups: Expression
    s: Expression
    t: Expression
    head_dim: Expression
    q_strides: EList
    k_strides: EList
    v_strides: EList
    causal: bool
    past: Expression
    window: int
    scale: float
    softcap: float
    dtype: DType
    n_inputs: ClassVar[int] = 3  # (q, k, v)
    prefix: ClassVar[str] = "attn"

    # -- semantics ------------------------------------------------------------------------------
    def hlir(self):
        raise BackendError("KernelAttention implements a pattern of HLIR ops, not one HLIR op")

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return prod((self.n_kv, self.groups, self.s, self.head_dim))

    def input_views(self):
        q_shape = (self.n_kv, self.groups, self.s, self.head_dim)
        kv_shape = (self.n_kv, self.t, self.head_dim)
        return ((q_shape, self.q_strides), (kv_shape, self.k_strides), (kv_shape, self.v_strides))

    def reference(self, ins, in_dtypes, env):
        (qs, qst), (ks, kst), (_, vst) = KernelAttention.input_views(self)[:3]  # (q: the rotated one, for rope)
        q = view(ins[0], qs, qst, env).astype(np.float64)  # (n_kv, g, s, hd)
        k = view(ins[1], ks, kst, env).astype(np.float64)  # (n_kv, t, hd)
        v = view(ins[2], ks, vst, env).astype(np.float64)
        s_, t_ = q.shape[2], k.shape[1]
        past = int(self.past.evaluate(env))
        return (
            attention_f64(q, k, v, self.scale, self.softcap, self.causal, past, self.window, s_, t_)
            .astype(self.dtype.np)
            .reshape(-1)
        )

    # -- code -----------------------------------------------------------------------------------
    def spec(self, variant: dec.DecodeVariant | None = None) -> dec.Spec:
        """The literal parameters the generators need; refuses what the kernels do not cover
        (the rules guard every one of these). `variant`: the decode schedule (default dec.DECODE)."""
        name = type(self).__name__
        for f in ("n_kv", "groups", "head_dim"):
            if not getattr(self, f).is_num:
                raise BackendError(f"{name}: {f} = {getattr(self, f)} must be a literal")
        hd = self.head_dim.value
        if hd not in HEAD_DIMS:
            raise BackendError(f"{name}: head_dim {hd} is not one of {HEAD_DIMS}")
        if self.dtype not in DTYPES:
            raise BackendError(f"{name}: dtype {self.dtype} is not one of {[str(d) for d in DTYPES]}")
        steps = []
        for what, st in (("k", self.k_strides), ("v", self.v_strides)):
            if linear_step(st[2]) != num(1):
                raise BackendError(f"{name}: {what} must be read with unit stride along head_dim, got {st[2]}")
            head, row = linear_step(st[0]), linear_step(st[1])
            if head is None or row is None:
                raise BackendError(f"{name}: {what} strides {st} are not linear")
            steps.append((head, row))
        if self.window < 0 or (self.window and not self.causal):
            raise BackendError(f"{name}: window {self.window} needs a causal mask")
        return dec.Spec(
            n_kv=self.n_kv.value, groups=self.groups.value, head_dim=hd, dtype=self.dtype, s=self.s, t=self.t,
            q_strides=tuple(self.q_strides), k_steps=steps[0], v_steps=steps[1], causal=self.causal,
            past=self.past, window=self.window, scale=self.scale, softcap=self.softcap, variant=variant or dec.DECODE,
        )  # fmt: skip

    def scratch_bytes(self, variant: dec.DecodeVariant | None = None) -> Expression:
        sp = self.spec(variant)
        # monotone in s (a plan pinned at its bucket's upper bounds sizes scratch there): the decode
        # path's partials for up to DECODE_ROWS query rows
        rows = num(sp.n_kv * sp.groups) * minimum(self.s, num(DECODE_ROWS))
        return rows * num(dec.splits(sp) * (sp.head_dim + 2) * 4)

    def zeroed_bytes(self, variant: dec.DecodeVariant | None = None) -> int:
        # the split decode kernel's self-resetting tickets, one per row block at up to DECODE_ROWS rows
        return 4 * dec.ticket_words(self.spec(variant), DECODE_ROWS)

    def render(self, slots, variant: dec.DecodeVariant | None = None) -> Kernel:
        sp = self.spec(variant)
        decls = dim_decls(self.dim_names(), slots)
        small = lt(self.s, num(DECODE_ROWS + 1))  # 1 on the decode path, else 0
        big = num(1) - small
        nsplit = dec.splits(sp)
        on_decode, on_prefill = f"S > {DECODE_ROWS}", f"S <= {DECODE_ROWS}"  # when each path skips
        row_blocks = num(sp.n_kv * dec.group_chunks(sp)) * self.s
        paths = [  # (code, entry suffix, grid, threads, dynamic shared bytes)
            (dec.decode_code(sp, decls, nsplit, on_decode, direct=False), "_dec", row_blocks * num(nsplit) * small,
             dec.THREADS, dec.split_shared(sp)),
        ]  # fmt: skip
        lib = dec.decode_lib(sp)  # (the tensor-core decode kernel's intrinsics: then the prefill kernel's too)
        if sp.dtype == DType.f32 or (sp.rope is not None and sp.rope.norm is not None):  # (a q-norm: q staged)
            paths.append((dec.decode_code(sp, decls, 1, on_prefill, direct=True), "_rows", row_blocks * big,
                          dec.THREADS, 0))  # fmt: skip
        else:
            paths.append((pre.prefill_code(sp, decls, on_prefill, lib=False), "_pre", pre.grid(sp, self.s) * big,
                          pre.tiling(sp).threads, pre.dynamic_shared(sp)))  # fmt: skip
        # a path whose grid is a literal 0 never runs in this plan (s is a literal: the decode
        # bucket's s = 1, say), so neither its code nor its launch is part of the kernel
        live = [p for p in paths if not (p[2].is_num and p[2].value == 0)]
        if not lib and any(tag == "_pre" for _, tag, *_ in live):
            lib = pre.intrinsics(sp.dtype) + pre._bits(sp.dtype)
        code = "\n".join([dec.cvt_code(sp.dtype) + lib, *(c for c, *_ in live)])
        name, code = name_code(self.prefix, code.replace("-INFINITY", "__int_as_float(0xff800000)"))  # no math.h
        launches = [Launch(name + tag, grid, threads, shared) for _, tag, grid, threads, shared in live]
        return Kernel(code, tuple(launches), headers(sp.dtype))


@dataclass(frozen=True)
class KernelAttentionRope(KernelAttention):
    """KernelAttention whose q is rotated (rotary embedding) as the kernel loads it, unioned by the rule
    `attn-rope` (attention.egg) with a KernelAttention whose q is dt(xf * cos + rot(xf) * sin), xf the
    f32 cast of x: saves the q rotary's own launch. Extra fields, over `shape` (s, heads, head_dim)
    of the rotated q (attention_decode.Rope): x's view `xst`, the cos and sin views `ca` and `sb`, and
    `rot`, the flat index of each element's partner (the halves-swapping Gather's Iota). Inputs
    (x, k, v, cos, sin); cos and sin are f32. q_strides read the rotated q (contiguous over `shape`)."""

    shape: EList
    xst: EList
    ca: EList
    rot: Expression
    sb: EList
    n_inputs: ClassVar[int] = 5  # (x, k, v, cos, sin)
    prefix: ClassVar[str] = "attnr"

    def input_views(self):
        q, k, v = super().input_views()
        return ((self.shape, self.xst), k, v, (self.shape, self.ca), (self.shape, self.sb))

    def rotated_q(self, ins, env) -> np.ndarray:
        """The rotated q, flat over `shape`, as the unfused plan computes it: f32 products and sum,
        rounded to the dtype."""
        xf = view(ins[0], self.shape, self.xst, env).astype(np.float32).reshape(-1)
        rot = np.broadcast_to(np.asarray(self.rot.evaluate({**env, "z": np.arange(xf.size)}), np.int64), xf.shape)
        cos, sin = (view(ins[k], self.shape, st, env).astype(np.float32).reshape(-1) for k, st in
                    ((3, self.ca), (4, self.sb)))  # fmt: skip
        return (xf * cos + xf[rot] * sin).astype(self.dtype.np)

    def reference(self, ins, in_dtypes, env):
        q = self.rotated_q(ins, env)
        return super().reference([q, ins[1], ins[2]], in_dtypes[:3], env)

    def spec(self, variant: dec.DecodeVariant | None = None) -> dec.Spec:
        sp = super().spec(variant)
        if len(self.shape) != 3 or not all(len(st) == 3 for st in (self.xst, self.ca, self.sb)):
            raise BackendError(f"KernelAttentionRope: views of 3 axes expected, got shape {self.shape}")
        return replace(sp, rope=dec.Rope(tuple(self.shape), tuple(self.xst), tuple(self.ca), self.rot, tuple(self.sb)))


def attention_f64(q, k, v, scale, softcap, causal, past, window, s, t):
    """Attention in f64: q (n_kv, g, s, hd), k/v (n_kv, t, hd) -> (n_kv, g, s, hd). A row with no
    visible key is NaN (0/0), as the unfused softmax over an all -inf row."""
    x = np.einsum("hgid,hjd->hgij", q, k) * scale
    if softcap:
        x = softcap * np.tanh(x / softcap)
    if causal:
        i, j = np.arange(s)[:, None], np.arange(t)[None, :]
        keep = j <= past + i
        if window:
            keep &= j > past + i - window
        x = np.where(keep, x, -math.inf)
    if t == 0:  # empty reductions are 0, as in the unfused plan
        return np.zeros(q.shape)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(-1, keepdims=True))
        return np.einsum("hgij,hjd->hgid", e, v) / e.sum(-1, keepdims=True)


ATTENTION_KERNELS = (KernelAttentionRope, KernelAttention)  # preference order
