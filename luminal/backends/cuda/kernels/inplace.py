"""KernelScatterInplace: a Scatter that updates its destination's device buffer in place.

Chosen by the `buffer_reuse` rule (inplace.egg) for persistent state that the scatter alone reads
(a KV cache): the output aliases input 0, so a decode step writes its s new rows and nothing else
(KernelScatter copies the whole destination first). Same fields as KernelScatter. One block of
BLOCK threads in three phases separated by __syncthreads -- clear a u32 claim word per written
destination element, atomicMax(claim[idx[j]], j + 1), write src[j] where the claim is j + 1 -- so
the last write wins deterministically and every phase costs O(#indexes), not O(destination).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from luminal.backends.cuda.kernel import Kernel, KernelOp, Launch, c_expr, dim_decls, headers, index_c, name_code
from luminal.dtype import DType
from luminal.hlir import Scatter
from luminal.hlir.op import EList
from luminal.shape.expr import ONE, ZERO, Expression, prod

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
        j = f"const long long j = (long long)in1[{index_c(self.index_shape, self.index_strides)}];"
        loop = f"  for (long long i = threadIdx.x; i < n_idx; i += {BLOCK}) {{\n    {j}\n"
        code = (
            f'extern "C" __global__ void __launch_bounds__({BLOCK}) KNAME({dt.cuda}* out, const {dt.cuda}* in0, '
            f"const {it.cuda}* __restrict__ in1, const {dt.cuda}* __restrict__ in2, "
            f"const long long* __restrict__ dims, unsigned int* __restrict__ win) {{\n{decls}"
            f"{loop}    if (j >= 0 && j < n_out) win[j] = 0u;\n  }}\n  __syncthreads();\n"
            f"{loop}    if (j >= 0 && j < n_out) atomicMax(&win[j], (unsigned int)(i + 1));\n  }}\n  __syncthreads();\n"
            f"{loop}    if (j >= 0 && j < n_out && win[j] == (unsigned int)(i + 1))\n"
            f"      out[j] = in2[{index_c(self.index_shape, self.src_strides)}];\n  }}\n}}\n"
        )  # fmt: skip
        name, code = name_code(self.prefix, code)
        return Kernel(code, (Launch(name, ONE, BLOCK),), headers(dt))


INPLACE_KERNELS = (KernelScatterInplace,)
