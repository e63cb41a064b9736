"""KernelAttentionNormRope: KernelAttentionRope whose q is also RMS-normed per head (qwen3's and
gemma 3's q_norm) as the decode kernel stages it, unioned by the rules of attention_norm.egg: saves
the q-norm + rotary kernel's launch, one a layer.

q = dt(rope(n)) with n = dt(xf * inv(row) * w'), xf = f32(x[xst(e)]) the projection, w' = f32(w[wst(e)])
(+ 1.0 for gemma's `offset` form) and, over each (row, head) of head_dim values,
inv = 1 / sqrt(f32(f64(sum xf^2) * (1 / f64(count))) + eps): exactly the chain nn/norm.py RMSNorm and
the frontend's rms_norm / mean write (a f64 mean of the f32 sum of squares, rounded to f32, IEEE
sqrt and reciprocal), then the rotation of KernelAttentionRope from n and its partner n(rot(e)) in
the same row. Inputs (x, k, v, cos, sin, w); w of the attention's dtype.

The kernel (`norm_stage`, called by attention_decode._rope_stage): the block's R query rows are
loaded into shared memory, one warp per row sums the squares (f32; the unfused plan's order differs,
as any two reductions' do), the normed values are rounded to dt in place, then rotated into the
rows attention reads. Only the decode kernel stages q: the prefill kernel loads q element by
element, so the rule offers this op only where s <= DECODE_ROWS (the decode bucket), and `render`
runs the decode kernel (one split per row, like f32) on the prefill path should a plan ever run it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from luminal.backends.cuda.kernel import c_expr, index_c, load, store
from luminal.backends.cuda.kernels import attention_decode as dec
from luminal.backends.cuda.kernels.attention import ATTENTION_KERNELS as _BASE
from luminal.backends.cuda.kernels.attention import KernelAttention, KernelAttentionRope
from luminal.errors import BackendError
from luminal.hlir.op import EList, view
from luminal.shape.expr import Expression
from luminal.shape.tracker import linear_step


@dataclass(frozen=True)
class QNorm:
    """The per-head RMSNorm of q (KernelAttentionNormRope's fields, as the generator uses them)."""

    wst: tuple[Expression, ...]  # the weight's view over the rope's (s, heads, head_dim) shape
    eps: float  # f32 value
    count: float  # the mean's divisor (head_dim), as the HLIR's f32 constant
    offset: bool  # w' = w + 1.0 (gemma)


@dataclass(frozen=True)
class KernelAttentionNormRope(KernelAttentionRope):
    """KernelAttentionRope whose x is RMS-normed per head first (module docstring). Extra fields: the
    weight's view `wst` over `shape`, `eps`, `count` (the mean's divisor) and `offset` (w + 1)."""

    wst: EList
    eps: float
    count: float
    offset: bool
    n_inputs: ClassVar[int] = 6  # (x, k, v, cos, sin, w)
    prefix: ClassVar[str] = "attnn"

    def input_views(self):
        return (*super().input_views(), (self.shape, self.wst))

    def normed_q(self, ins, env) -> np.ndarray:
        """n over `shape` as the unfused plan computes and stores it (module docstring), f32."""
        xf = view(ins[0], self.shape, self.xst, env).astype(np.float32)
        ss = (xf * xf).sum(-1, dtype=np.float32)
        mean = (ss.astype(np.float64) * (1.0 / np.float64(np.float32(self.count)))).astype(np.float32)
        with np.errstate(divide="ignore"):
            inv = np.float32(1.0) / np.sqrt(mean + np.float32(self.eps))
        w = view(ins[5], self.shape, self.wst, env).astype(np.float32)
        if self.offset:
            w = w + np.float32(1.0)
        return ((xf * inv[..., None]) * w).astype(self.dtype.np).astype(np.float32)

    def rotated_q(self, ins, env) -> np.ndarray:
        nf = self.normed_q(ins, env).reshape(-1)
        rot = np.broadcast_to(np.asarray(self.rot.evaluate({**env, "z": np.arange(nf.size)}), np.int64), nf.shape)
        cos, sin = (view(ins[k], self.shape, st, env).astype(np.float32).reshape(-1) for k, st in
                    ((3, self.ca), (4, self.sb)))  # fmt: skip
        return (nf * cos + nf[rot] * sin).astype(self.dtype.np)

    def spec(self, variant: dec.DecodeVariant | None = None) -> dec.Spec:
        sp = super().spec(variant)
        name, hd = type(self).__name__, sp.head_dim
        if len(self.wst) != 3 or not self.shape[2].is_num or self.shape[2].value != hd:
            raise BackendError(f"{name}: the normed rows must be head_dim {hd} long, shape {self.shape}")
        _check_rows(name, sp, hd)
        return replace(sp, rope=replace(sp.rope, norm=QNorm(tuple(self.wst), self.eps, self.count, self.offset)))


def _check_rows(name: str, sp: dec.Spec, hd: int) -> None:
    """q's rows (h, g, i) are whole rows of the normed (s, heads, head_dim) tensor, read in order, and
    every element's rotation partner lies in its own row (its offset in the row depends on d only)."""
    steps = [linear_step(st) for st in sp.q_strides]
    if (
        any(st is None or not st.is_num for st in steps)
        or steps[3].value != 1
        or any(st.value % hd for st in steps[:3])
    ):
        raise BackendError(f"{name}: q must read whole head_dim rows in order, q strides {sp.q_strides}")
    e = np.arange(64 * hd)
    r = np.asarray(sp.rope.rot.evaluate({"z": e}), np.int64)
    if r.shape != e.shape or (r // hd != e // hd).any() or (r - e != (r - e)[e % hd]).any():
        raise BackendError(f"{name}: the rotation partner {sp.rope.rot} leaves the head's row")


def norm_stage(sp: dec.Spec) -> str:
    """C: the block's R q rows normed and rotated into shared memory `sm_q` (module docstring)."""
    r, nm, dt = sp.rope, sp.rope.norm, sp.dtype
    r_, hd, t_ = dec.rows_per_block(sp), sp.head_dim, dec.THREADS
    e = f"({dec.q_index(sp, 'h', 'qg', 'i', 'qd')})"
    x = load(dt, f"q[{index_c(r.shape, r.xst, e)}]")
    w = load(dt, f"qw[{index_c(r.shape, nm.wst, e)}]")
    if nm.offset:
        w = f"__fadd_rn({w}, 1.0f)"
    n = load(dt, store(dt, f"__fmul_rn(__fmul_rn(sm_n[o], sm_inv[o / {hd}]), {w})"))
    partner = f"sm_n[o / {hd} * {hd} + (int)(({c_expr(r.rot, e)}) - {e} + qd)]"
    c, sn = index_c(r.shape, r.ca, e), index_c(r.shape, r.sb, e)
    rot = load(dt, store(dt, f"__fadd_rn(__fmul_rn(sm_n[o], cosv[{c}]), __fmul_rn({partner}, sinv[{sn}]))"))
    red = "".join(f"    ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, {o}));\n" for o in (16, 8, 4, 2, 1))
    loop = (f"  for (int o = threadIdx.x; o < {r_ * hd}; o += {t_}) {{\n"
            f"    const long long qg = (long long)gc * {r_} + o / {hd}, qd = o % {hd};\n")  # fmt: skip
    return f"""  __shared__ float sm_q[{r_ * hd}], sm_n[{r_ * hd}], sm_inv[{r_}];
{loop}    sm_n[o] = {x};
  }}
  __syncthreads();
  for (int rr = threadIdx.x / 32; rr < {r_}; rr += {t_ // 32}) {{  // a warp per row: its sum of squares
    float ss = 0.0f;
    for (int d = rr * {hd} + threadIdx.x % 32; d < (rr + 1) * {hd}; d += 32)
      ss = __fadd_rn(ss, __fmul_rn(sm_n[d], sm_n[d]));
{red}    if (threadIdx.x % 32 == 0)
      sm_inv[rr] = __frcp_rn(__fsqrt_rn(__fadd_rn((float)((double)ss * {1.0 / nm.count!r}), {nm.eps!r}f)));
  }}
  __syncthreads();
{loop}    sm_n[o] = {n};
  }}
  __syncthreads();
{loop}    sm_q[o] = {rot};
  }}
  __syncthreads();
"""


# preference order (backend.py): llama's rope, qwen3 / gemma's norm + rope, plain attention
ATTENTION_KERNELS: tuple[type[KernelAttention], ...] = (_BASE[0], KernelAttentionNormRope, *_BASE[1:])
