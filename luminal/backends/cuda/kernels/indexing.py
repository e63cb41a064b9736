"""Data-dependent indexing kernels: KernelGather and KernelScatter.

KernelGather = Gather's fields + dtype (of data) + index_dtype: out[i] = data_view[idx_view[i]]
(the index value is a flat logical index into the data view). An out-of-range index reads 0 and
is reported in the plan's error slot of the dims buffer; the runtime then raises BackendError,
like the reference.
KernelGatherFused: KernelGather computing its index with a fused body (`index`, luminal/hlir/fexpr.py,
its value at flat position i of the row-major index shape) instead of reading an index buffer:
the flat index arithmetic the frontend builds around a gather (row * stride + column, the range
check) runs in the gather's own launch (rule: indexing.egg `gather-fused`). Inputs: (data, the
body's leaves).
KernelScatter = Scatter's fields + dtype (of dest, src and out) + index_dtype. Parallel and
deterministic "last write wins" in three launches over a scratch of one u64 per output element:
copy dest into out and clear the scratch; atomicMax(scratch[idx[j]], j + 1) over the indexes; write
src[j] where scratch[idx[j]] == j + 1. Out-of-range indexes are dropped, like the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from luminal.backends.cuda.kernel import (
    ERROR_SLOT,
    EW_BLOCK,
    EW_TILE,
    EW_UNROLL,
    Kernel,
    KernelOp,
    Launch,
    c_expr,
    dim_decls,
    elementwise,  # fmt: skip
    ew_grid,
    headers,
    index_c,
    name_code,
    store,
)
from luminal.backends.cuda.kernels.fused import element_values, evaluate_body, leaf_dtypes, leaf_reads
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir import Gather, Scatter, fexpr
from luminal.hlir.fexpr import FArgs, FNode
from luminal.hlir.op import EList
from luminal.shape.expr import Expression, prod
from luminal.shape.tracker import contiguous_strides


@dataclass(frozen=True)
class KernelGather(KernelOp):
    index_shape: EList
    index_strides: EList
    data_shape: EList
    data_strides: EList
    dtype: DType
    index_dtype: DType
    n_inputs: ClassVar[int] = 2  # (indexes, data)
    hlir_class: ClassVar[type] = Gather
    prefix: ClassVar[str] = "gather"

    def input_views(self):
        return ((self.index_shape, self.index_strides), (self.data_shape, self.data_strides))

    def render(self, slots) -> Kernel:
        j = f"(long long)in0[{index_c(self.index_shape, self.index_strides)}]"
        return gather_kernel(self, slots, [self.index_dtype], 1, [], j)


def gather_kernel(op, slots, idx_dtypes: list[DType], data: int, lines: list[str], j: str) -> Kernel:
    """The gather of `op` (KernelGather or KernelGatherFused) from input `data`: `lines` then C `j`
    compute the flat data index of output element i from the inputs of `idx_dtypes` (the others)."""
    dt = op.dtype
    decls = dim_decls(op.dim_names(), slots) + f"  const long long nd = {c_expr(prod(op.data_shape))};\n"
    di = index_c(op.data_shape, op.data_strides, "j")
    report = ""
    if ERROR_SLOT in slots:  # the runtime raises BackendError after the run, like the reference
        e = slots[ERROR_SLOT]
        report = f"        ((long long*)dims)[{e}] = 1;\n        ((long long*)dims)[{e + 1}] = j;\n"
    body = "".join(f"      {ln}\n" for ln in lines)
    body += (f"      const long long j = {j};\n"
             f"      if (j >= 0 && j < nd) {{\n        out[i] = in{data}[{di}];\n      }} else {{\n"
             f"        out[i] = {store(dt, '0')};\n{report}      }}")  # fmt: skip
    ins = [*idx_dtypes, dt] if data == len(idx_dtypes) else [dt, *idx_dtypes]
    return elementwise(op.prefix, dt, ins, prod(op.index_shape), body, decls, headers(*ins))


@dataclass(frozen=True)
class KernelGatherFused(KernelOp):
    """KernelGather whose index is computed by `index` (one fused expression over index_shape)."""

    index_shape: EList
    data_shape: EList
    data_strides: EList
    dtype: DType
    index_dtype: DType
    index: FArgs
    prefix: ClassVar[str] = "gather_fused"

    def __post_init__(self):
        if len(self.index) != 1 or not isinstance(self.index[0], FNode):
            raise BackendError(f"KernelGatherFused: index must be one fused expression (got {self.index})")

    @property
    def n_inputs(self) -> int:  # type: ignore[override]
        return 1 + fexpr.n_leaves(self.index)

    def nodes(self) -> list[FNode]:
        return list(fexpr.ops(self.index))

    def leaf_dtypes(self) -> tuple[DType, ...]:
        return leaf_dtypes(self.nodes(), self.n_inputs - 1)

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return prod(self.index_shape)

    def dim_names(self) -> frozenset[str]:
        names = frozenset().union(*(e.dims() for e in (*self.index_shape, *self.data_shape, *self.data_strides)))
        return names.union(*(n.op.dim_names() for n in self.nodes()))

    def input_views(self):
        raise BackendError("KernelGatherFused reads its leaves through several views: use input_reads()")

    def input_reads(self):
        return ((0, self.data_shape, self.data_strides), *leaf_reads(self.nodes(), 1))

    def reference(self, ins, in_dtypes, env):
        root = self.index[0]
        idx = evaluate_body(root, ins[1:], in_dtypes[1:], env)
        flat = contiguous_strides(tuple(self.index_shape))
        hl = Gather(self.index_shape, flat, self.data_shape, self.data_strides)
        return hl.reference([np.asarray(idx, self.index_dtype.np), ins[0]], (self.index_dtype, in_dtypes[0]), env)

    def render(self, slots) -> Kernel:
        dts = self.leaf_dtypes()
        lines, (name,) = element_values(self.index, dts, self.index_shape, 1)
        return gather_kernel(self, slots, list(dts), 0, lines, f"(long long)({name})")


def _loop(n: str, body: str) -> str:
    return (f"  const long long n = {n};\n"
            f"  const long long base = (long long)blockIdx.x * {EW_TILE} + threadIdx.x;\n"
            f"#pragma unroll\n  for (int u = 0; u < {EW_UNROLL}; ++u) {{\n"
            f"    const long long i = base + (long long)u * {EW_BLOCK};\n"
            f"    if (i < n) {{\n{body}\n    }}\n  }}\n")  # fmt: skip


@dataclass(frozen=True)
class KernelScatter(KernelOp):
    dest_shape: EList
    dest_strides: EList
    index_shape: EList
    index_strides: EList
    src_strides: EList
    dtype: DType
    index_dtype: DType
    n_inputs: ClassVar[int] = 3  # (dest, indexes, src)
    hlir_class: ClassVar[type] = Scatter
    prefix: ClassVar[str] = "scatter"

    def input_views(self):
        return ((self.dest_shape, self.dest_strides), (self.index_shape, self.index_strides),
                (self.index_shape, self.src_strides))  # fmt: skip

    def scratch_bytes(self) -> Expression:
        return prod(self.dest_shape) * 8

    def render(self, slots) -> Kernel:
        dt, it = self.dtype, self.index_dtype
        sig = (f"({dt.cuda}* __restrict__ out, const {dt.cuda}* __restrict__ in0, const {it.cuda}* __restrict__ in1, "
               f"const {dt.cuda}* __restrict__ in2, const long long* __restrict__ dims, "
               "unsigned long long* __restrict__ win)")  # fmt: skip
        decls = dim_decls(self.dim_names(), slots) + f"  const long long n_out = {c_expr(prod(self.dest_shape))};\n"
        n_idx = c_expr(prod(self.index_shape))
        dest = index_c(self.dest_shape, self.dest_strides)
        j = f"      const long long j = (long long)in1[{index_c(self.index_shape, self.index_strides)}];\n"
        head = f'extern "C" __global__ void __launch_bounds__({EW_BLOCK}) '
        code = (
            f"{head}KNAME_init{sig} {{\n{decls}"
            + _loop("n_out", f"      out[i] = in0[{dest}];\n      win[i] = 0ull;")
            + f"}}\n{head}KNAME_claim{sig} {{\n{decls}"
            + _loop(n_idx, j + "      if (j >= 0 && j < n_out) atomicMax(&win[j], (unsigned long long)(i + 1));")
            + f"}}\n{head}KNAME_write{sig} {{\n{decls}"
            + _loop(n_idx, j + "      if (j >= 0 && j < n_out && win[j] == (unsigned long long)(i + 1))\n"
                    f"        out[j] = in2[{index_c(self.index_shape, self.src_strides)}];")
            + "}\n"
        )  # fmt: skip
        name, code = name_code(self.prefix, code)
        g_out, g_idx = ew_grid(prod(self.dest_shape)), ew_grid(prod(self.index_shape))
        launches = (Launch(f"{name}_init", g_out, EW_BLOCK), Launch(f"{name}_claim", g_idx, EW_BLOCK),
                    Launch(f"{name}_write", g_idx, EW_BLOCK))  # fmt: skip
        return Kernel(code, launches, headers(dt))


# preference order (backend.py): the gather computing its index before the one reading it
INDEXING_KERNELS = (KernelGatherFused, KernelGather, KernelScatter)
