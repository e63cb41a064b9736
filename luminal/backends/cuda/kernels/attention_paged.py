"""KernelPagedAttention: attention over a paged KV cache (luminal/nn/attention.py, KVCache(paged=True))
as one op of the CUDA backend, unioned by the paged rules of attention.egg into the e-class of
nn.attend_paged (they reuse the stages of the contiguous-cache rules, so they share its file).

Fields: n_kv, groups, s query rows (new tokens of any sequences), pages (the page table's width),
head_dim, slots (the pool's capacity), the q view (n_kv, groups, s, head_dim), the sliding window
(0: none), scale, softcap, dtype. Inputs: (q, k_pool, v_pool, rows, pos): the pools are contiguous
(n_kv, slots, head_dim); rows (s, pages) i32 holds each query's sequence's slots in token order,
pos (s,) i32 each query's position: query i sees keys j <= pos_i (and j > pos_i - W), key j read
from slot rows[i, j]. Output (n_kv, groups, s, head_dim).

Kernels: the split-KV decode kernel of attention_decode.py with the page-table indirection (one
extra 4-byte load per key and lane group), for s <= DECODE_ROWS; the same kernel without splits
(one block per query row, writing the output) beyond. Grids are fixed for the plan as for
KernelAttention; the live lengths come from `pos`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from luminal.backends.cuda.kernel import Kernel, KernelOp, Launch, dim_decls, headers, name_code
from luminal.backends.cuda.kernels import attention_decode as dec
from luminal.backends.cuda.kernels.attention import DECODE_ROWS, DTYPES, HEAD_DIMS, KernelAttentionRope, attention_f64
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir.op import EList, view
from luminal.shape.expr import Expression, lt, minimum, num, prod


@dataclass(frozen=True)
class KernelPagedAttention(KernelOp):
    n_kv: Expression
    groups: Expression
    s: Expression
    pages: Expression
    head_dim: Expression
    slots: Expression
    q_strides: EList
    window: int
    scale: float
    softcap: float
    dtype: DType
    n_inputs: ClassVar[int] = 5  # (q, k_pool, v_pool, rows, pos)
    prefix: ClassVar[str] = "pattn"

    def hlir(self):
        raise BackendError("KernelPagedAttention implements a pattern of HLIR ops, not one HLIR op")

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return prod((self.n_kv, self.groups, self.s, self.head_dim))

    def input_views(self):
        pool = ((self.n_kv, self.slots, self.head_dim), _contiguous((self.n_kv, self.slots, self.head_dim)))
        return (
            ((self.n_kv, self.groups, self.s, self.head_dim), self.q_strides),
            pool,
            pool,
            ((self.s, self.pages), _contiguous((self.s, self.pages))),
            ((self.s,), _contiguous((self.s,))),
        )

    def reference(self, ins, in_dtypes, env):
        (qs, qst), (ps, pst), _, (rs, rst), (ss, sst) = KernelPagedAttention.input_views(self)  # (q: rotated, rope)
        q = view(ins[0], qs, qst, env).astype(np.float64)  # (n_kv, g, s, hd)
        kp = view(ins[1], ps, pst, env).astype(np.float64)  # (n_kv, slots, hd)
        vp = view(ins[2], ps, pst, env).astype(np.float64)
        rows = view(ins[3], rs, rst, env).astype(np.int64)  # (s, pages)
        pos = view(ins[4], ss, sst, env).astype(np.int64)  # (s,)
        out = np.zeros(q.shape)
        for i in range(q.shape[2]):  # each query over its own keys (pos_i + 1 of them at most)
            t = min(int(pos[i]) + 1, rows.shape[1])
            k, v = kp[:, rows[i, :t]], vp[:, rows[i, :t]]
            out[:, :, i : i + 1] = attention_f64(
                q[:, :, i : i + 1], k, v, self.scale, self.softcap, True, int(pos[i]), self.window, 1, t
            )
        return out.astype(self.dtype.np).reshape(-1)

    def spec(self, variant: dec.DecodeVariant | None = None) -> dec.Spec:
        name = type(self).__name__
        for f in ("n_kv", "groups", "head_dim", "slots"):
            if not getattr(self, f).is_num:
                raise BackendError(f"{name}: {f} = {getattr(self, f)} must be a literal")
        hd = self.head_dim.value
        if hd not in HEAD_DIMS or self.dtype not in DTYPES:
            raise BackendError(f"{name}: head_dim {hd} / dtype {self.dtype} not supported ({HEAD_DIMS}, {DTYPES})")
        step = (num(self.slots.value * hd), num(hd))
        return dec.Spec(
            n_kv=self.n_kv.value, groups=self.groups.value, head_dim=hd, dtype=self.dtype, s=self.s, t=self.pages,
            q_strides=tuple(self.q_strides), k_steps=step, v_steps=step, causal=True, past=num(0),
            window=self.window, scale=self.scale, softcap=self.softcap, variant=variant or dec.DECODE, paged=True,
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
        small = lt(self.s, num(DECODE_ROWS + 1))
        nsplit = dec.splits(sp)
        on_decode, on_rows = f"S > {DECODE_ROWS}", f"S <= {DECODE_ROWS}"
        row_blocks = num(sp.n_kv * dec.group_chunks(sp)) * self.s
        paths = [  # (code, entry suffix, grid, dynamic shared bytes)
            (dec.decode_code(sp, decls, nsplit, on_decode, direct=False), "_dec", row_blocks * num(nsplit) * small,
             dec.split_shared(sp)),
            (dec.decode_code(sp, decls, 1, on_rows, direct=True), "_rows", row_blocks * (num(1) - small), 0),
        ]  # fmt: skip
        # a path whose grid is a literal 0 never runs in this plan (a decode step's s = 1), so neither
        # its code nor its launch is part of the kernel (as KernelAttention: one launch step a layer)
        live = [p for p in paths if not (p[2].is_num and p[2].value == 0)]
        lib = dec.decode_lib(sp) if any(tag == "_dec" for _, tag, *_ in live) else ""
        code = "\n".join([dec.cvt_code(sp.dtype) + lib, *(c for c, *_ in live)])
        name, code = name_code(self.prefix, code.replace("-INFINITY", "__int_as_float(0xff800000)"))
        launches = tuple(Launch(name + tag, grid, dec.THREADS, shared) for _, tag, grid, shared in live)
        return Kernel(code, launches, headers(sp.dtype))


@dataclass(frozen=True)
class KernelPagedAttentionRope(KernelPagedAttention):
    """KernelPagedAttention whose q is rotated as the kernel loads it (as KernelAttentionRope: rule
    `paged-rope`, attention.egg): saves the q rotary's own launch of a Hugging Face decode step.
    Inputs (x, k_pool, v_pool, rows, pos, cos, sin); cos and sin f32; the rope fields as
    KernelAttentionRope's (q_strides read the rotated q, contiguous over `shape`)."""

    shape: EList
    xst: EList
    ca: EList
    rot: Expression
    sb: EList
    n_inputs: ClassVar[int] = 7  # (x, k_pool, v_pool, rows, pos, cos, sin)
    prefix: ClassVar[str] = "pattnr"

    def input_views(self):
        q, kp, vp, rows, pos = super().input_views()
        return ((self.shape, self.xst), kp, vp, rows, pos, (self.shape, self.ca), (self.shape, self.sb))

    def reference(self, ins, in_dtypes, env):
        q = KernelAttentionRope.rotated_q(self, [ins[0], None, None, ins[5], ins[6]], env)
        return super().reference([q, *ins[1:5]], in_dtypes[:5], env)

    def spec(self, variant: dec.DecodeVariant | None = None) -> dec.Spec:
        sp = super().spec(variant)
        if not all(len(st) == len(self.shape) for st in (self.xst, self.ca, self.sb)):
            raise BackendError(f"KernelPagedAttentionRope: views of {len(self.shape)} axes expected")
        return replace(sp, rope=dec.Rope(tuple(self.shape), tuple(self.xst), tuple(self.ca), self.rot, tuple(self.sb)))


def _contiguous(shape) -> tuple[Expression, ...]:
    from luminal.shape.tracker import contiguous_strides

    return contiguous_strides(tuple(shape))


PAGED_KERNELS = (KernelPagedAttentionRope, KernelPagedAttention)  # preference order
