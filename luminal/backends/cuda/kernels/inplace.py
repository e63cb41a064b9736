"""KernelScatterInplace: a Scatter that updates its destination's device buffer in place.

Chosen by the `buffer_reuse` rule (inplace.egg) for persistent state that the scatter alone reads
(a KV cache): the output aliases input 0, so a decode step writes its s new rows and nothing else
(KernelScatter copies the whole destination first). Same fields as KernelScatter plus `wide`. Three phases -- clear a
u32 claim word per written destination element, atomicMax(claim[idx[j]], j + 1), write src[j]
where the claim is j + 1 -- so the last write wins deterministically and every phase costs
O(#indexes), not O(destination). `wide = false`: one block, the phases separated by
__syncthreads (one launch: decode writes a few hundred elements); `wide = true`: three launches
over the whole grid (prefill writes n_kv * s * head_dim). The rule offers both; search picks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from luminal.backends.cuda.kernel import Kernel, KernelOp, Launch, c_expr, dim_decls, headers, index_c, name_code
from luminal.dtype import DType
from luminal.hlir import Scatter
from luminal.hlir.op import EList
from luminal.shape.expr import ONE, ZERO, Expression, ceil_div, prod

BLOCK = 1024


@dataclass(frozen=True)
class KernelScatterInplace(KernelOp):
    dest_shape: EList
    dest_strides: EList
    index_shape: EList
    index_strides: EList
    src_strides: EList
    dtype: DType
    index_dtype: DType
    wide: bool
    n_inputs: ClassVar[int] = 3  # (dest, indexes, src)
    hlir_class: ClassVar[type] = Scatter
    prefix: ClassVar[str] = "scatter_inplace"
    inplace: ClassVar[bool] = True

    def alias(self) -> tuple[int, Expression]:
        return (0, ZERO)

    def input_views(self):
        return ((self.dest_shape, self.dest_strides), (self.index_shape, self.index_strides),
                (self.index_shape, self.src_strides))  # fmt: skip

    def scratch_bytes(self) -> Expression:
        return prod(self.dest_shape) * 4

    def render(self, slots) -> Kernel:
        dt, it = self.dtype, self.index_dtype
        decls = dim_decls(self.dim_names(), slots) + (
            f"  const long long n_out = {c_expr(prod(self.dest_shape))};\n"
            f"  const long long n_idx = {c_expr(prod(self.index_shape))};\n"
        )
        sig = (f"({dt.cuda}* out, const {dt.cuda}* in0, const {it.cuda}* __restrict__ in1, const {dt.cuda}* "
               "__restrict__ in2, const long long* __restrict__ dims, unsigned int* __restrict__ win)")  # fmt: skip
        j = f"const long long j = (long long)in1[{index_c(self.index_shape, self.index_strides)}];"
        if self.wide:
            first = f"(long long)blockIdx.x * {BLOCK} + threadIdx.x"
            step = f"(long long)gridDim.x * {BLOCK}"
        else:
            first, step = "threadIdx.x", str(BLOCK)
        loop = f"  for (long long i = {first}; i < n_idx; i += {step}) {{\n    {j}\n"
        phases = (
            f"{loop}    if (j >= 0 && j < n_out) win[j] = 0u;\n  }}\n",
            f"{loop}    if (j >= 0 && j < n_out) atomicMax(&win[j], (unsigned int)(i + 1));\n  }}\n",
            f"{loop}    if (j >= 0 && j < n_out && win[j] == (unsigned int)(i + 1))\n"
            f"      out[j] = in2[{index_c(self.index_shape, self.src_strides)}];\n  }}\n",
        )
        head = f'extern "C" __global__ void __launch_bounds__({BLOCK}) '
        if not self.wide:
            code = f"{head}KNAME{sig} {{\n{decls}" + "  __syncthreads();\n".join(phases) + "}\n"
            name, code = name_code(self.prefix, code)
            return Kernel(code, (Launch(name, ONE, BLOCK),), headers(dt))
        code = "".join(f"{head}KNAME_{k}{sig} {{\n{decls}{ph}}}\n" for k, ph in enumerate(phases))
        name, code = name_code(self.prefix, code)
        grid = ceil_div(prod(self.index_shape), BLOCK)
        return Kernel(code, tuple(Launch(f"{name}_{k}", grid, BLOCK) for k in range(3)), headers(dt))


INPLACE_KERNELS = (KernelScatterInplace,)
