"""KernelGemv: the decode matmul y[1, n] = x[1, k] @ W^T with W stored (n, k) row-major (the HF
Linear layout), a second alternative to cuBLASLt when m = 1 (gemv.egg, ruleset matmul_backend).

Fields: n (rows of W = outputs, may be a dim), k and ld (W's row stride) as literals, dtype.
Inputs: (x, W) -- x the contiguous length-k row, W rows of ld elements. One warp per output row
(8 rows per 256-thread block): lanes stride over the row in 16-byte vectors (8 bf16 / 8 f16 /
4 f32), read x the same way (it stays in L1/L2), fuse multiply-adds into an f32 accumulator, and
combine with warp shuffles; lane 0 rounds once at the store. The rule guarantees k and ld are
multiples of one vector, so there is no tail and every load is aligned (buffers are 256-aligned).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.backends.cuda.kernel import Kernel, KernelOp, Launch, c_expr, dim_decls, headers, name_code, store
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir.op import compute_dtype
from luminal.shape.expr import Expression, ceil_div, num, z

BLOCK = 256
ROWS_PER_BLOCK = BLOCK // 32
VECTOR_BYTES = 16

# per dtype: elements per 16-byte vector, and C that folds vector pair (wv, xv) into `acc`
_DOT = {
    DType.bf16: (8, "const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&wv);\n"
                    "      const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&xv);\n"
                    "#pragma unroll\n      for (int q = 0; q < 4; ++q) {\n"
                    "        const float2 a = __bfloat1622float2(wp[q]), b = __bfloat1622float2(xp[q]);\n"
                    "        acc = fmaf(a.x, b.x, acc); acc = fmaf(a.y, b.y, acc);\n      }"),
    DType.f16: (8, "const __half2* wp = reinterpret_cast<const __half2*>(&wv);\n"
                   "      const __half2* xp = reinterpret_cast<const __half2*>(&xv);\n"
                   "#pragma unroll\n      for (int q = 0; q < 4; ++q) {\n"
                   "        const float2 a = __half22float2(wp[q]), b = __half22float2(xp[q]);\n"
                   "        acc = fmaf(a.x, b.x, acc); acc = fmaf(a.y, b.y, acc);\n      }"),
    DType.f32: (4, "const float4 a = *reinterpret_cast<const float4*>(&wv);\n"
                   "      const float4 b = *reinterpret_cast<const float4*>(&xv);\n"
                   "      acc = fmaf(a.x, b.x, acc); acc = fmaf(a.y, b.y, acc); acc = fmaf(a.z, b.z, acc);"
                   " acc = fmaf(a.w, b.w, acc);"),
}  # fmt: skip


@dataclass(frozen=True)
class KernelGemv(KernelOp):
    n: Expression
    k: Expression
    ld: Expression
    dtype: DType
    n_inputs: ClassVar[int] = 2  # (x, W)
    prefix: ClassVar[str] = "gemv"

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return self.n

    def input_views(self):
        return (((self.k,), (z,)), ((self.n, self.k), (self.ld * z, z)))

    def reference(self, ins, in_dtypes, env):
        n, k, ld = (int(e.evaluate(env)) for e in (self.n, self.k, self.ld))
        acc = compute_dtype(self.dtype)
        x = ins[0][:k].astype(acc)
        w = (
            np.lib.stride_tricks.as_strided(ins[1], (n, k), (ld * ins[1].itemsize, ins[1].itemsize))
            if n
            else np.zeros((0, k))
        )
        return (w.astype(acc) @ x).astype(self.dtype.np)

    def render(self, slots) -> Kernel:
        dt = self.dtype
        if dt not in _DOT:
            raise BackendError(f"KernelGemv on {dt}: only f32, f16 and bf16 have a vectorized GEMV")
        per, dot = _DOT[dt]
        for name, e in (("k", self.k), ("ld", self.ld)):
            if not e.is_num or e.value % per:
                raise BackendError(
                    f"KernelGemv: {name} = {e} must be a literal multiple of {per} (the rule guards this)"
                )
        t = dt.cuda
        code = f"""extern "C" __global__ void __launch_bounds__({BLOCK})
KNAME({t}* __restrict__ out, const {t}* __restrict__ in0, const {t}* __restrict__ in1,
      const long long* __restrict__ dims) {{
{dim_decls(self.dim_names(), slots)}  const long long n = {c_expr(self.n)};
  const long long row = (long long)blockIdx.x * {ROWS_PER_BLOCK} + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= n) return;  // uniform per warp
  const uint4* __restrict__ w = reinterpret_cast<const uint4*>(in1 + row * {self.ld.value}LL);
  const uint4* __restrict__ x = reinterpret_cast<const uint4*>(in0);
  float acc = 0.0f;
#pragma unroll 4
  for (int v = lane; v < {self.k.value // per}; v += 32) {{
    const uint4 wv = __ldg(w + v);
    const uint4 xv = __ldg(x + v);
    {{
      {dot}
    }}
  }}
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (lane == 0) out[row] = {store(dt, "acc")};
}}
"""
        name, code = name_code(self.prefix, code)
        return Kernel(code, (Launch(name, ceil_div(self.n, num(ROWS_PER_BLOCK)), BLOCK),), headers(dt))


GEMV_KERNELS = (KernelGemv,)
