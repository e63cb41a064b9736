"""KernelScatterInplace: a Scatter that updates its destination's device buffer in place.

Chosen by the `buffer_reuse` rule (inplace.egg) for persistent state that the scatter alone reads
(a KV cache): the output aliases input 0, so a decode step writes its s new rows and nothing else
(KernelScatter copies the whole destination first). Same fields as KernelScatter plus `wide`. Three phases -- clear a
u32 claim word per written destination element, atomicMax(claim[idx[j]], j + 1), write src[j]
where the claim is j + 1 -- so the last write wins deterministically and every phase costs
O(#indexes), not O(destination). `wide = false`: one block, the phases separated by
__syncthreads (one launch: decode writes a few hundred elements); `wide = true`: three launches
over the whole grid (prefill writes n_kv * s * head_dim). The rules offer exactly one shape per
bucket: one block where the bucket bounds the index count by 4096, grid-wide elsewhere (inplace.egg).

KernelScatterFused: the same in-place update with the indexes and the written values computed by
fused bodies (`index`, `src`: one expression each, luminal/hlir/fexpr.py) at each index position
instead of read from buffers: the cache position p + row, and the rotary embedding of k (with a
q/k-norm) or v read at its offset in the stacked q/k/v GEMV's output, are computed in the launch
that writes the cache (rule: inplace.egg, `scatter-fused`). Inputs: (dest, the bodies' leaves).
Values are held and rounded like KernelFused's (fused.py). When the written values reduce over
rows (qwen3's k-norm), the write phase runs a warp per row of the index shape (RowWrite), the
row's reductions computed once, cooperatively, as KernelFused's row layout computes them.

KernelScatterPair: a layer's two one-block KernelScatterFused (k and v: the same destination view,
the same index body) in one launch; KernelAliasAfter: each cache's new value after it, no launch
(rule: inplace.egg, `scatter-pair`; the in-place contract's `also_writes`, luminal/hlir/op.py).
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
from luminal.backends.cuda.kernels.emit import cvar
from luminal.backends.cuda.kernels.fused import (
    element_values,
    evaluate_body,
    group_size,
    leaf_dtypes,
    leaf_reads,
    row_code,
    row_coords,
)
from luminal.backends.cuda.kernels.reduce import KernelReduce
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir import Scatter, fexpr
from luminal.hlir.fexpr import FArgs, FNode
from luminal.hlir.op import EList
from luminal.shape.expr import ONE, ZERO, Expression, ceil_div, num, prod, z
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
        j = f"(long long)in1[{index_c(self.index_shape, self.index_strides)}]"
        src = f"in2[{index_c(self.index_shape, self.src_strides)}]"
        return scatter_kernel(self, slots, [self.index_dtype, self.dtype], ([], j), ([], src))


def scatter_kernel(op, slots, in_dtypes: list[DType], index, value, rows: RowWrite | None = None,
                   more=None, mutable: int = 0) -> Kernel:  # fmt: skip
    """The three-phase in-place scatter of `op` (KernelScatterInplace or KernelScatterFused) reading
    inputs in1, in2, .. of `in_dtypes`: `index` = (statements, C) of the destination index of index
    position i, `value` = (statements, C) of the element written there (after index's). With `rows`
    the write phase runs over the index shape's rows instead (row_write), `value` unused. `more`:
    (loop, j) -> code appended to the write phase (KernelScatterPair: the second cache's writes,
    through the claims of the same indexes); `mutable`: the input k >= 1 declared writable."""
    dt = op.dtype
    decls = dim_decls(op.dim_names(), slots) + (
        f"  const long long n_out = {c_expr(prod(op.dest_shape))};\n"
        f"  const long long n_idx = {c_expr(prod(op.index_shape))};\n"
    )
    params = "".join(f"{'' if k + 1 == mutable else 'const '}{d.cuda}* __restrict__ in{k + 1}, "
                     for k, d in enumerate(in_dtypes))  # fmt: skip
    sig = (f"({dt.cuda}* out, const {dt.cuda}* in0, {params}"
           "const long long* __restrict__ dims, unsigned int* __restrict__ win)")  # fmt: skip
    if op.wide:
        first = f"(long long)blockIdx.x * {BLOCK} + threadIdx.x"
        step = f"(long long)gridDim.x * {BLOCK}"
    else:
        first, step = "threadIdx.x", str(BLOCK)
    loop = f"  for (long long i = {first}; i < n_idx; i += {step}) {{\n"
    j = "".join(f"    {ln}\n" for ln in index[0]) + f"    const long long j = {index[1]};\n"
    write = element_write(loop, j, value, "out") if rows is None else rows.code(op.wide)
    write += more(loop, j) if more else ""
    phases = (
        f"{loop}{j}    if (j >= 0 && j < n_out) win[j] = 0u;\n  }}\n",
        f"{loop}{j}    if (j >= 0 && j < n_out) atomicMax(&win[j], (unsigned int)(i + 1));\n  }}\n",
        write,
    )
    head = f'extern "C" __global__ void __launch_bounds__({BLOCK}) '
    hdrs = headers(dt, *in_dtypes)
    if not op.wide:
        code = f"{head}KNAME{sig} {{\n{decls}" + "  __syncthreads();\n".join(phases) + "}\n"
        name, code = name_code(op.prefix, code)
        return Kernel(code, (Launch(name, ONE, BLOCK),), hdrs)
    code = "".join(f"{head}KNAME_{k}{sig} {{\n{decls}{ph}}}\n" for k, ph in enumerate(phases))
    name, code = name_code(op.prefix, code)
    grid = ceil_div(prod(op.index_shape), BLOCK)
    grids = (grid, grid, grid if rows is None else rows.grid())
    return Kernel(code, tuple(Launch(f"{name}_{k}", g, BLOCK) for k, g in enumerate(grids)), hdrs)


def element_write(loop: str, j: str, value: tuple[list[str], str], dest: str) -> str:
    """The write phase, one thread per index position: `value` stored at `dest`[j] where i won j's claim."""
    body = "".join(f"      {ln}\n" for ln in value[0])
    return (f"{loop}{j}    if (j >= 0 && j < n_out && win[j] == (unsigned int)(i + 1)) {{\n{body}"
            f"      {dest}[j] = {value[1]};\n    }}\n  }}\n")  # fmt: skip


@dataclass(frozen=True)
class RowWrite:
    """The write phase of an in-place scatter whose written values reduce over rows (qwen3's k-norm
    before rotary): a group of `group` threads per row of the index shape (all axes but the last),
    the row's reductions computed once, cooperatively (emit.py, as KernelFused's row layout), then
    each lane writes its columns' elements where it won the claim -- instead of every element's
    thread recomputing its row's reductions serially (element_values). `lines`: the statements
    writing one row (its coordinates y0.., then fused.row_code's) where `row` and `lane` are set;
    `rows`: the number of rows."""

    group: int
    rows: Expression
    lines: tuple[str, ...]

    def code(self, wide: bool) -> str:
        per = BLOCK // self.group
        if wide:
            first, step = f"(long long)blockIdx.x * {per} + threadIdx.x / {self.group}", f"(long long)gridDim.x * {per}"
        else:
            first, step = f"(long long)(threadIdx.x / {self.group})", str(per)
        return (f"  const long long rows = {c_expr(self.rows)};\n"
                f"  for (long long row = {first}; row < rows; row += {step}) {{  // uniform per row group\n"
                f"    const int lane = threadIdx.x % {self.group};\n"
                + "".join(f"    {ln}\n" for ln in self.lines) + "  }\n")  # fmt: skip

    def grid(self) -> Expression:
        return ceil_div(self.rows, num(BLOCK // self.group))


def row_write(op: KernelScatterFused, dts: tuple[DType, ...], index: tuple[list[str], str], base: int = 1,
              dest: str = "out") -> RowWrite | None:  # fmt: skip
    """The row form of `op`'s write phase (RowWrite) when its written values reduce over rows and a
    row fits a warp's group; None otherwise (every element computes its value on its own). Leaf k is
    parameter in{base + k}; the row's elements are stored into `dest`."""
    shape = op.index_shape
    reds = [n.op.iters for n in fexpr.ops(op.src) if isinstance(n.op, KernelReduce)]
    if not shape or not reds:
        return None
    row_shape, ncol = shape[:-1], shape[-1]
    g = group_size([ncol, *reds])
    if g > 32:  # a group spanning warps would need __syncthreads inside a row loop of uneven trip counts
        return None

    def put(name: str, col: str | None) -> list[str]:
        # the value first: the index's statements below may reuse its local names in their block
        return ["{", f"  const {op.dtype.cuda} wv = {store(op.dtype, name)};",
                f"  const long long i = row * ncol + {col};", *(f"  {ln}" for ln in index[0]),
                f"  const long long dj = {index[1]};",
                f"  if (dj >= 0 && dj < n_out && win[dj] == (unsigned int)(i + 1)) {dest}[dj] = wv;", "}"]  # fmt: skip

    rvars = tuple(cvar(f"y{k}") for k in range(len(row_shape)))
    prelude, tail = row_code(op.src[0], dts, g, rvars, ncol, put, base=base)
    return RowWrite(g, prod(row_shape), (*row_coords(row_shape), *prelude, *tail))


@dataclass(frozen=True)
class KernelScatterFused(KernelOp):
    """KernelScatterInplace computing its indexes and the values it writes with fused bodies
    (`index` and `src`, each one expression over the row-major index shape: its value at flat
    position i is index i's destination, resp. the element written there) instead of reading them."""

    dest_shape: EList
    dest_strides: EList
    index_shape: EList
    dtype: DType
    index_dtype: DType
    wide: bool
    index: FArgs
    src: FArgs
    prefix: ClassVar[str] = "scatter_fused"
    inplace: ClassVar[bool] = True

    def __post_init__(self):
        if any(len(b) != 1 or not isinstance(b[0], FNode) for b in (self.index, self.src)):
            raise BackendError(f"KernelScatterFused: index and src must be one fused expression each (got {self})")

    @property
    def n_inputs(self) -> int:  # type: ignore[override]
        return 1 + fexpr.n_leaves((*self.index, *self.src))

    def alias(self) -> tuple[int, Expression]:
        return (0, ZERO)

    def nodes(self) -> list[FNode]:
        return list(fexpr.ops((*self.index, *self.src)))

    def leaf_dtypes(self) -> tuple[DType, ...]:
        return leaf_dtypes(self.nodes(), self.n_inputs - 1)

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return prod(self.dest_shape)

    def dim_names(self) -> frozenset[str]:
        names = frozenset().union(*(e.dims() for e in (*self.dest_shape, *self.dest_strides, *self.index_shape)))
        return names.union(*(n.op.dim_names() for n in self.nodes()))

    def scratch_bytes(self) -> Expression:
        return prod(self.dest_shape) * 4

    def input_views(self):
        raise BackendError("KernelScatterFused reads its leaves through several views: use input_reads()")

    def input_reads(self):
        return ((0, self.dest_shape, self.dest_strides), *leaf_reads(self.nodes(), 1))

    def reference(self, ins, in_dtypes, env):
        idx, vals = (evaluate_body(b[0], ins[1:], in_dtypes[1:], env) for b in (self.index, self.src))
        flat = contiguous_strides(tuple(self.index_shape))
        hl = Scatter(self.dest_shape, self.dest_strides, self.index_shape, flat, flat)
        arrays = [ins[0], np.asarray(idx, self.index_dtype.np), np.asarray(vals, self.dtype.np)]
        return hl.reference(arrays, (in_dtypes[0], self.index_dtype, self.dtype), env)

    def render(self, slots) -> Kernel:
        dts = self.leaf_dtypes()
        il, (iv,) = element_values(self.index, dts, self.index_shape, 1)
        index = (il, f"(long long)({iv})")
        rows = row_write(self, dts, index)
        if rows is not None:
            return scatter_kernel(self, slots, list(dts), index, None, rows)
        sl, (sv,) = element_values(self.src, dts, self.index_shape, 1)  # in a block nested in the index's
        return scatter_kernel(self, slots, list(dts), index, (sl, store(self.dtype, sv)))


@dataclass(frozen=True)
class KernelScatterPair(KernelOp):
    """Two one-block KernelScatterFused with the same destination view and the same index body -- a
    layer's k and v cache writes at decode -- in one launch (rule: inplace.egg, `scatter-pair`).
    Inputs: (k cache, v cache, the bodies' leaves). The output is the new k cache (aliases input 0);
    the v cache's rows are written in place too (`also_writes`), its new value is a KernelAliasAfter
    of (v cache, this op). Both writes share the claims: the indexes are the same, so index position
    i wins element j in both caches alike (the three phases of scatter_kernel, the write phase
    storing k's value into out and v's into in1; no sync between them: different buffers)."""

    dest_shape: EList
    dest_strides: EList
    index_shape: EList
    dtype: DType
    index_dtype: DType
    index: FArgs
    src: FArgs
    vsrc: FArgs
    prefix: ClassVar[str] = "scatter_pair"
    inplace: ClassVar[bool] = True
    wide: ClassVar[bool] = False  # one block only (the rule pairs one-block writes)

    def __post_init__(self):
        self.half(self.src), self.half(self.vsrc)  # the bodies' checks

    def half(self, src: FArgs) -> KernelScatterFused:
        """One cache's write as a KernelScatterFused (its leaves numbered as this op's, from input 1)."""
        return KernelScatterFused(self.dest_shape, self.dest_strides, self.index_shape, self.dtype,
                                  self.index_dtype, False, self.index, src)  # fmt: skip

    @property
    def n_inputs(self) -> int:  # type: ignore[override]
        return 2 + fexpr.n_leaves((*self.index, *self.src, *self.vsrc))

    def alias(self) -> tuple[int, Expression]:
        return (0, ZERO)

    def also_writes(self) -> tuple[int, ...]:
        return (1,)

    def nodes(self) -> list[FNode]:
        return list(fexpr.ops((*self.index, *self.src, *self.vsrc)))

    def leaf_dtypes(self) -> tuple[DType, ...]:
        return leaf_dtypes(self.nodes(), self.n_inputs - 2)

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return prod(self.dest_shape)

    def dim_names(self) -> frozenset[str]:
        return self.half(self.src).dim_names() | self.half(self.vsrc).dim_names()

    def scratch_bytes(self) -> Expression:
        return prod(self.dest_shape) * 4  # one claim word per element: the caches share the claims

    def input_views(self):
        raise BackendError("KernelScatterPair reads its leaves through several views: use input_reads()")

    def input_reads(self):
        view = (self.dest_shape, self.dest_strides)
        return ((0, *view), (1, *view), *leaf_reads(self.nodes(), 2))

    def reference(self, ins, in_dtypes, env):
        """The new k cache; the v cache's buffer (ins[1]) is updated in place, as the kernel does."""
        leaves, dts = list(ins[2:]), tuple(in_dtypes[2:])
        k = self.half(self.src).reference([ins[0], *leaves], (in_dtypes[0], *dts), env)
        v = np.asarray(self.half(self.vsrc).reference([ins[1], *leaves], (in_dtypes[1], *dts), env)).reshape(-1)
        ins[1].reshape(-1)[: v.size] = v
        return k

    def render(self, slots) -> Kernel:
        dts = self.leaf_dtypes()
        il, (iv,) = element_values(self.index, dts, self.index_shape, 2)
        index = (il, f"(long long)({iv})")
        k, v = self.half(self.src), self.half(self.vsrc)
        rows, vrows = row_write(k, dts, index, 2), row_write(v, dts, index, 2, "in1")

        def values(half: KernelScatterFused) -> tuple[list[str], str]:
            sl, (sv,) = element_values(half.src, dts, self.index_shape, 2)
            return sl, store(self.dtype, sv)

        def more(loop: str, j: str) -> str:  # in a block of its own: its names may repeat k's
            code = vrows.code(False) if vrows is not None else element_write(loop, j, values(v), "in1")
            return "  {\n" + code + "  }\n"

        value = None if rows is not None else values(k)
        return scatter_kernel(self, slots, [self.dtype, *dts], index, value, rows, more, mutable=1)


@dataclass(frozen=True)
class KernelAliasAfter(KernelOp):
    """Input 0's bytes (`shape` elements of `dtype`), read after input 1 ran: the v cache's new value
    once a KernelScatterPair (input 1) wrote its rows, and the k cache's once the pair wrote it too
    (inplace.egg, `scatter-pair`). An alias of input 0 that reads nothing, so it renders no code and
    no launch (like KernelSlice); input 1 only orders it (and whatever reads it) after the writes."""

    shape: EList
    dtype: DType
    n_inputs: ClassVar[int] = 2
    prefix: ClassVar[str] = "alias_after"

    def alias(self) -> tuple[int, Expression]:
        return (0, ZERO)

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return prod(self.shape)

    def input_views(self):
        """Input 0 flat over the cache (nothing is read: the view sizes input 0 where the op runs alone,
        as the search prices it; with no view the one-op plan gave the cache 0 bytes and failed, so on
        the GPU every plan holding the pair was unpriceable and the search took plain writes)."""
        return (((prod(self.shape),), (z,)),)

    def reference(self, ins, in_dtypes, env):
        return np.asarray(ins[0]).reshape(-1)[: int(prod(self.shape).evaluate(env))]

    def render(self, slots) -> Kernel:
        return Kernel("", (), frozenset())


# preference order (backend.py): the paired writes (the alias of a cache after its pair) first, then
# the write computing its values before the one reading them
INPLACE_KERNELS = (KernelAliasAfter, KernelScatterPair, KernelScatterFused, KernelScatterInplace)
