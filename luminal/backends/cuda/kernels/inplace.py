"""KernelScatterInplace: a Scatter that updates its destination's device buffer in place.

Chosen by the `buffer_reuse` rule (inplace.egg) for persistent state that the scatter alone reads
(a KV cache): the output aliases input 0, so a decode step writes its s new rows and nothing else
(KernelScatter copies the whole destination first). Same fields as KernelScatter plus `wide`. Three phases -- clear a
u32 claim word per written destination element, atomicMax(claim[idx[j]], j + 1), write src[j]
where the claim is j + 1 -- so the last write wins deterministically and every phase costs
O(#indexes), not O(destination). `wide = false`: one block, the phases separated by
__syncthreads (one launch: decode writes a few hundred elements); `wide = true`: three launches
over the whole grid (prefill writes n_kv * s * head_dim). The rule offers both; search picks.

KernelScatterFused: the same in-place update with the written values computed by a fused body
(`src`, one expression, luminal/hlir/fexpr.py) evaluated at each index position instead of read
from a buffer: the rotary embedding of k (or the slice of a stacked q/k/v GEMV that is v) is
computed in the launch that writes it into the cache (rule: inplace.egg, `scatter-fused`). Inputs:
(dest, indexes, the body's leaves). Values are held and rounded like KernelFused's (fused.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.backends.cuda.kernel import (
    Kernel,
    KernelOp,
    Launch,
    c_expr,
    dim_decls,
    headers,
    index_c,
    name_code,
    store,
)
from luminal.backends.cuda.kernels.emit import wide
from luminal.backends.cuda.kernels.fused import arg_dtype, element_value
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir import Scatter, fexpr
from luminal.hlir.fexpr import FArgs, FLeaf, FNode
from luminal.hlir.op import EList
from luminal.shape.expr import ONE, ZERO, Expression, ceil_div, prod
from luminal.shape.tracker import contiguous_strides

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
        src = f"in2[{index_c(self.index_shape, self.src_strides)}]"
        return scatter_kernel(self, slots, [self.dtype], [], src)


def scatter_kernel(op, slots, src_dtypes: list[DType], lines: list[str], value: str) -> Kernel:
    """The three-phase in-place scatter of `op` (KernelScatterInplace or KernelScatterFused): `lines`
    then C `value` compute the element written for index position i from inputs in2, in3, .. of
    `src_dtypes`."""
    dt, it = op.dtype, op.index_dtype
    decls = dim_decls(op.dim_names(), slots) + (
        f"  const long long n_out = {c_expr(prod(op.dest_shape))};\n"
        f"  const long long n_idx = {c_expr(prod(op.index_shape))};\n"
    )
    params = "".join(f"const {d.cuda}* __restrict__ in{k + 2}, " for k, d in enumerate(src_dtypes))
    sig = (f"({dt.cuda}* out, const {dt.cuda}* in0, const {it.cuda}* __restrict__ in1, {params}"
           "const long long* __restrict__ dims, unsigned int* __restrict__ win)")  # fmt: skip
    j = f"const long long j = (long long)in1[{index_c(op.index_shape, op.index_strides)}];"
    if op.wide:
        first = f"(long long)blockIdx.x * {BLOCK} + threadIdx.x"
        step = f"(long long)gridDim.x * {BLOCK}"
    else:
        first, step = "threadIdx.x", str(BLOCK)
    loop = f"  for (long long i = {first}; i < n_idx; i += {step}) {{\n    {j}\n"
    body = "".join(f"      {ln}\n" for ln in lines)
    phases = (
        f"{loop}    if (j >= 0 && j < n_out) win[j] = 0u;\n  }}\n",
        f"{loop}    if (j >= 0 && j < n_out) atomicMax(&win[j], (unsigned int)(i + 1));\n  }}\n",
        f"{loop}    if (j >= 0 && j < n_out && win[j] == (unsigned int)(i + 1)) {{\n{body}"
        f"      out[j] = {value};\n    }}\n  }}\n",
    )
    head = f'extern "C" __global__ void __launch_bounds__({BLOCK}) '
    hdrs = headers(dt, *src_dtypes)
    if not op.wide:
        code = f"{head}KNAME{sig} {{\n{decls}" + "  __syncthreads();\n".join(phases) + "}\n"
        name, code = name_code(op.prefix, code)
        return Kernel(code, (Launch(name, ONE, BLOCK),), hdrs)
    code = "".join(f"{head}KNAME_{k}{sig} {{\n{decls}{ph}}}\n" for k, ph in enumerate(phases))
    name, code = name_code(op.prefix, code)
    grid = ceil_div(prod(op.index_shape), BLOCK)
    return Kernel(code, tuple(Launch(f"{name}_{k}", grid, BLOCK) for k in range(3)), hdrs)


@dataclass(frozen=True)
class KernelScatterFused(KernelOp):
    """KernelScatterInplace writing `src` (a fused body: its value at flat position i of the
    row-major index shape is the element written for index i) instead of reading a src buffer."""

    dest_shape: EList
    dest_strides: EList
    index_shape: EList
    index_strides: EList
    dtype: DType
    index_dtype: DType
    wide: bool
    src: FArgs
    prefix: ClassVar[str] = "scatter_fused"
    inplace: ClassVar[bool] = True

    def __post_init__(self):
        if len(self.src) != 1 or not isinstance(self.src[0], FNode):
            raise BackendError(f"KernelScatterFused: src must be one fused expression (got {self.src})")

    @property
    def n_inputs(self) -> int:  # type: ignore[override]
        return 2 + fexpr.n_leaves(self.src)

    def alias(self) -> tuple[int, Expression]:
        return (0, ZERO)

    def nodes(self) -> list[FNode]:
        return list(fexpr.ops(self.src))

    def leaf_dtypes(self) -> tuple[DType, ...]:
        out: dict[int, DType] = {}
        for n in self.nodes():
            for k, a in enumerate(n.args):
                if isinstance(a, FLeaf):
                    out.setdefault(a.index, arg_dtype(n.op, k))
        return tuple(out[i] for i in range(self.n_inputs - 2))

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return prod(self.dest_shape)

    def dim_names(self) -> frozenset[str]:
        names = frozenset().union(*(e.dims() for e in (*self.dest_shape, *self.dest_strides, *self.index_shape,
                                                       *self.index_strides)))  # fmt: skip
        return names.union(*(n.op.dim_names() for n in self.nodes()))

    def scratch_bytes(self) -> Expression:
        return prod(self.dest_shape) * 4

    def input_views(self):
        raise BackendError("KernelScatterFused reads its leaves through several views: use input_reads()")

    def input_reads(self):
        reads = [(0, self.dest_shape, self.dest_strides), (1, self.index_shape, self.index_strides)]
        return tuple(reads) + tuple((2 + a.index, *n.op.input_views()[k]) for n in self.nodes()
                                    for k, a in enumerate(n.args) if isinstance(a, FLeaf))  # fmt: skip

    def reference(self, ins, in_dtypes, env):
        root = self.src[0]
        vals = fexpr.evaluate(root.op, root.args, list(ins[2:]), tuple(in_dtypes[2:]), env, hold=wide,
                              exact=lambda op: op.exact_operands)  # fmt: skip
        flat = contiguous_strides(tuple(self.index_shape))
        hl = Scatter(self.dest_shape, self.dest_strides, self.index_shape, self.index_strides, flat)
        return hl.reference([ins[0], ins[1], np.asarray(vals, self.dtype.np)], (*in_dtypes[:2], self.dtype), env)

    def render(self, slots) -> Kernel:
        dts = self.leaf_dtypes()

        lines, name, _ = element_value(self.src[0], dts, self.index_shape, 2)
        return scatter_kernel(self, slots, list(dts), lines, store(self.dtype, name))


# preference order (backend.py): the write computing its values before the one reading them
INPLACE_KERNELS = (KernelScatterFused, KernelScatterInplace)
