"""KernelGemvFused: the decode GEMV (gemv.py's generator) with a computed x, several weights and an
epilogue, in one launch (rules: gemvfused.egg, ruleset `fusion_grow`).

Fields: `ns` (rows of each weight), `k`, `lds` (each weight's row stride, literals), `dtype`, `x`
and `epi` (fused bodies, luminal/hlir/fexpr.py). Inputs: the m weights (one per `ns` entry, each
its own buffer: nothing is copied or concatenated), then the bodies' leaves, numbered by first use.

* `x` (one expression): the length-k vector every weight row is multiplied by. A leaf is read from
  its buffer like KernelGemv's x; an expression (RMSNorm or any row normalization, with its row
  reductions) is computed by every block into shared memory before the weight stream, rounded to
  `dtype` as the unfused chain stores it. x is a few KB and L2-resident; the weights stream once.
  The schedule is gemv.looped: a grid of at most one wave of blocks that each compute x once and
  walk many rows, the first rows' weights prefetched into L2 while x is computed.
* `epi` (one expression, "zip" mode): every weight has n = ns[0] rows, output row j is `epi` at j
  where `KernelAcc(q)` is the dot product of x with row j of weight q (summed in f32 and rounded to
  `dtype`, as the unfused GEMV stores it; every node of a fused body rounds its result to its own
  dtype, docs/numerics.md): a residual or bias add, or the gate of a gated MLP, act(acc0) * acc1.
  The output has epi's dtype and n elements.
* `epi` empty ("stack" mode): the output is the m products one after another (sum of ns
  elements), each rounded to `dtype`: the q/k/v projections of one x in one launch; each product
  is a KernelSlice of it (an alias, slice.py).

Semantics are KernelGemv's for the dot products and KernelFused's for the bodies; `reference`
evaluates exactly that (docs/numerics.md: fused kernels).
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
    name_code,
    store,
)
from luminal.backends.cuda.kernels import gemv
from luminal.backends.cuda.kernels.emit import Position, cvar, out_shape
from luminal.backends.cuda.kernels.fused import leaf_dtypes, row_code, row_coords
from luminal.backends.cuda.kernels.gemv import _DOT, GemvSource, GemvVariant, check_gemv, gemv_code, gemv_grid, looped
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir import fexpr
from luminal.hlir.fexpr import FArgs, FExpr, FLeaf, FNode
from luminal.hlir.op import EList
from luminal.shape.expr import ONE, ZERO, Expression, num, prod, z
from luminal.shape.tracker import contiguous_strides

PROLOGUE_SMEM = 40 << 10  # a computed x in shared memory (gemvfused.egg GemvXMax): 8 KB left of the 48 KB
PROLOGUE_TILE = 8


@dataclass(frozen=True)
class KernelAcc(KernelOp):
    """Inside a KernelGemvFused epilogue: dot product `index` at the output row being stored, a
    value of `shape` (the GEMV's (1, n) result) and `dtype`. Never a kernel of its own."""

    index: int
    shape: EList
    dtype: DType
    n_inputs: ClassVar[int] = 0
    accumulator: ClassVar[bool] = True

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return prod(self.shape)

    def input_views(self):
        return ()

    def reference(self, ins, in_dtypes, env):
        raise BackendError("KernelAcc has no value outside a KernelGemvFused (its reference substitutes it)")

    def render(self, slots) -> Kernel:
        raise BackendError("KernelAcc is part of a KernelGemvFused epilogue, not a kernel")


@dataclass(frozen=True)
class KernelLoad(KernelOp):
    """Inside a KernelGemvFused x body: the fused op's input (number of weights + `index`), read
    like a leaf. The row normalization's input h comes in this way, so no extraction can compute h
    itself (a residual stream sum, say) inline in every block of the GEMV."""

    index: int
    dtype: DType
    n_inputs: ClassVar[int] = 0
    loads_input: ClassVar[bool] = True

    def out_dtype(self, in_dtypes):
        return self.dtype

    def input_views(self):
        return ()

    def reference(self, ins, in_dtypes, env):
        raise BackendError("KernelLoad has no value outside a KernelGemvFused (its reference substitutes it)")

    def render(self, slots) -> Kernel:
        raise BackendError("KernelLoad is part of a KernelGemvFused prologue, not a kernel")


@dataclass(frozen=True)
class KernelGemvFused(KernelOp):
    ns: EList
    k: Expression
    lds: EList
    dtype: DType
    x: FArgs
    epi: FArgs
    prefix: ClassVar[str] = "gemvf"

    def __post_init__(self):
        if len(self.x) > 1 or len(self.epi) > 1 or not self.ns or len(self.ns) != len(self.lds):
            raise BackendError(f"KernelGemvFused: at most one x and one epilogue, one ld per weight (got {self})")

    @property
    def m(self) -> int:
        return len(self.ns)

    @property
    def base(self) -> int:
        """Input position of leaf 0: after the weights and the inputs the op reads itself (x when
        there is no x body, else h, the tensor the x body normalizes: KernelLoad 0; the residual of
        the epilogue: KernelLoad 1)."""
        loads = [n.op.index + 1 for n in self.nodes() if isinstance(n.op, KernelLoad)]
        return self.m + max(loads + [0 if self.x else 1])

    @property
    def n_inputs(self) -> int:  # type: ignore[override]
        return self.base + fexpr.n_leaves((*self.x, *self.epi))

    def nodes(self) -> list[FNode]:
        return list(fexpr.ops((*self.x, *self.epi)))

    def leaf_dtypes(self) -> tuple[DType, ...]:
        """Each leaf's dtype, from the node that reads it (x itself when x is a leaf)."""
        known = {self.x[0].index: self.dtype} if self.x and isinstance(self.x[0], FLeaf) else {}
        return leaf_dtypes(self.nodes(), self.n_inputs - self.base, known)

    def out_dtype(self, in_dtypes):
        if not self.epi:
            return self.dtype
        dts = fexpr.dtypes(self.epi, tuple(in_dtypes)[self.base :])
        return dts[id(self.epi[0])]

    def out_size(self) -> Expression:
        if not self.epi:
            total: Expression = ZERO
            for n in self.ns:
                total = total + n
            return total
        return self.ns[0]

    def dim_names(self) -> frozenset[str]:
        names = frozenset().union(*(n.dims() for n in self.ns))
        return names.union(*(n.op.dim_names() for n in self.nodes()))

    def input_views(self):
        raise BackendError("KernelGemvFused reads its leaves through several views: use input_reads()")

    def input_reads(self):
        b = self.base
        reads = [(q, (n, self.k), (ld * z, z)) for q, (n, ld) in enumerate(zip(self.ns, self.lds, strict=True))]
        x = self.x[0] if self.x else FLeaf(self.m - b)
        if isinstance(x, FLeaf):
            reads.append((b + x.index, (self.k,), (z,)))
        for n in self.nodes():
            for j, a in enumerate(n.args):
                if isinstance(a, FLeaf):
                    reads.append((b + a.index, *n.op.input_views()[j]))
                elif isinstance(a.op, KernelLoad):
                    reads.append((self.m + a.op.index, *n.op.input_views()[j]))
        return tuple(reads)

    # -- semantics ----------------------------------------------------------------------------------
    def reference(self, ins, in_dtypes, env):
        m, k, b = self.m, int(self.k.evaluate(env)), self.base
        leaves, leaf_dts = list(ins[b:]), tuple(in_dtypes[b:])
        x = self.x[0] if self.x else None
        epi = self.epi
        if b > m:  # the inputs the bodies load: more leaves for the evaluation
            n0 = len(leaves)
            load = lambda e: FLeaf(n0 + e.op.index) if _is(e, KernelLoad) else None  # noqa: E731
            x = fexpr.substitute((x,), load)[0] if x is not None else None
            epi = fexpr.substitute(epi, load)
            leaves, leaf_dts = [*leaves, *ins[m:b]], (*leaf_dts, *in_dtypes[m:b])
        if x is None:
            xv = np.asarray(ins[m])
        elif isinstance(x, FLeaf):
            xv = np.asarray(leaves[x.index])
        else:
            xv = fexpr.evaluate(x.op, x.args, leaves, leaf_dts, env)  # every node rounded to its dtype
        xv = xv.reshape(-1)[:k].astype(np.float32)
        accs = []
        for q, (n, ld) in enumerate(zip(self.ns, self.lds, strict=True)):
            nv, ldv, w = int(n.evaluate(env)), int(ld.evaluate(env)), np.asarray(ins[q])
            rows = np.lib.stride_tricks.as_strided(w, (nv, k), (ldv * w.itemsize, w.itemsize))
            accs.append(rows.astype(np.float32) @ xv if nv else np.zeros(0, np.float32))
        if not self.epi:
            return np.concatenate(accs).astype(self.dtype.np)
        base = len(leaves)
        (epi,) = fexpr.substitute(epi, lambda e: FLeaf(base + e.op.index) if _is(e, KernelAcc) else None)
        all_dts = (*leaf_dts, *(self.dtype,) * m)
        if isinstance(epi, FLeaf):
            return accs[epi.index - base].astype(self.dtype.np)
        return fexpr.evaluate(epi.op, epi.args, [*leaves, *accs], all_dts, env)  # accs rounded to dtype where read

    # -- code ---------------------------------------------------------------------------------------
    def variant(self) -> GemvVariant:
        """gemv.looped: a grid of one wave whose blocks stage x (or run the prologue) once and walk
        many rows; 8 W vectors of 16 bytes in flight per lane (4 in f32, whose wider dot products
        spill at 8 under the 64-register promise), shared by the weights of a gated pair."""
        m, per = self.m if self.epi else 1, _DOT[self.dtype][0]
        prologue = bool(self.x) and not isinstance(self.x[0], FLeaf) and self.base == self.m + 1  # one load: RMSNorm
        long_rows = self.k.value * self.dtype.itemsize >= gemv.EARLY_ROW_BYTES
        early = gemv.EARLY and self.dtype.itemsize == 2 and (prologue or long_rows)
        return looped(self.out_size(), self.k.value // per, m, (4 if self.dtype == DType.f32 else 8) // m, early=early)

    def render_salt(self) -> str:
        """The schedule `render` picks (gemv.looped reads module knobs): part of the rendered cache's key
        (a symbolic k has none: `render` refuses it)."""
        return self.variant().name if self.k.is_num and self.dtype in _DOT else ""

    def render(self, slots, variant: GemvVariant | None = None) -> Kernel:
        dt, m, b = self.dtype, self.m, self.base
        check_gemv(type(self).__name__, dt, self.k, tuple(self.lds))
        v = variant or self.variant()
        leaf_dts = self.leaf_dtypes()
        params = (dt,) * b + leaf_dts
        odt = self.out_dtype(params)
        kv = self.k.value // _DOT[dt][0]
        x = self.x[0] if self.x else FLeaf(m - b)  # no body: x is input m
        prologue = ""
        if not isinstance(x, FLeaf):
            if self.k.value * dt.itemsize > PROLOGUE_SMEM:
                raise BackendError(f"KernelGemvFused: a computed x of {self.k} {dt} exceeds shared memory (rule guard)")
            prologue = _prologue(x, leaf_dts, v.block, self.k.value, dt, b, m)
        weights = tuple((f"in{q}", ld.value) for q, ld in enumerate(self.lds))
        if self.epi:
            n, ns, put = c_expr(self.ns[0]), (), _epilogue(self.epi[0], leaf_dts, odt, b, m)
        else:
            n, ns, put = c_expr(self.out_size()), tuple(c_expr(e) for e in self.ns), f"out[row] = {store(dt, 'acc0')};"
        src = GemvSource(dtype=dt, kv=kv, weights=weights, n=n, zip=bool(self.epi),
                         x=None if prologue else f"in{b + x.index}", params=params, store=put,
                         out=odt, ns=ns, prologue=prologue)  # fmt: skip
        name, code = name_code(self.prefix, gemv_code(v, src, dim_decls(self.dim_names(), slots)))
        hdrs = headers(dt, odt, *leaf_dts, *fexpr.dtypes((*self.x, *self.epi), leaf_dts + (dt,) * m).values())
        return Kernel(code, (Launch(name, gemv_grid(v, self.out_size()), v.block),), hdrs)


def _is(e: FExpr, cls: type) -> bool:
    return isinstance(e, FNode) and isinstance(e.op, cls)


def _prologue(root: FNode, leaf_dts: tuple[DType, ...], g: int, k: int, dt: DType, base: int, m: int) -> str:
    """C run by the whole block (g threads): x's first k values into the shared array xs, row by
    row of the root's shape (row-level reductions cooperative), rounded to dt."""
    shape = out_shape(root.op)
    if not shape:
        raise BackendError("KernelGemvFused: x is a scalar expression (codegen invariant)")
    row_shape, ncol = shape[:-1], shape[-1]
    rvars = tuple(cvar(f"y{j}") for j in range(len(row_shape)))

    def put(name: str, col: str | None) -> list[str]:
        return [f"if (row * ncol + {col} < {k}) xt[row * ncol + {col}] = {store(dt, name)};"]

    # registers: the GEMV promises ptxas 4 blocks per SM (64 registers a thread), so the prologue
    # keeps at most PROLOGUE_TILE values per thread per array; longer rows re-read x from L1/L2
    lines, tail = row_code(root, leaf_dts, g, rvars, ncol, put, base=base, tile_max=PROLOGUE_TILE, load_base=m)
    body = [*row_coords(row_shape), *lines, *tail, "__syncthreads();  // the group's shared scratch is reused"]
    return (f"    {dt.cuda}* xt = reinterpret_cast<{dt.cuda}*>(xs);\n    const int lane = threadIdx.x;\n"
            f"    for (long long row = 0; row < {c_expr(prod(row_shape))}; ++row) {{\n"
            + "".join(f"      {ln}\n" for ln in body) + "    }\n")  # fmt: skip


def _epilogue(root: FExpr, leaf_dts: tuple[DType, ...], odt: DType, base: int, m: int) -> str:
    """C storing output row `row` (a thread of its own: lane 0) from acc0.. and the leaves."""
    if not isinstance(root, FNode):
        raise BackendError("KernelGemvFused: the epilogue is a plain input (codegen invariant)")
    shape = out_shape(root.op)
    row = cvar("row")
    coords = _coords(row, shape)

    def acc(node: FNode, pos: Position) -> str:
        flat: Expression = ZERO
        for c, st in zip(pos, contiguous_strides(tuple(node.op.shape)), strict=True):
            flat = flat + c * st.substitute("z", num(1))
        if flat is not row:
            raise BackendError(f"KernelGemvFused: dot product {node.op.index} read at {flat}, not at its row (rules)")
        return f"acc{node.op.index}"

    lines, tail = row_code(root, leaf_dts, 1, coords, None, lambda v, _: [f"out[row] = {store(odt, v)};"], base, acc,
                           load_base=m)  # fmt: skip
    return "const int lane = 0; " + " ".join((*lines, *tail))


def _coords(row: Expression, shape: EList) -> tuple:
    """Coordinates of flat index `row` in a row-major `shape` (size-1 axes are 0)."""
    big = [j for j, d in enumerate(shape) if d is not ONE]
    if len(big) <= 1:
        return tuple(row if j in big else ZERO for j in range(len(shape)))
    out = []
    for j, (d, st) in enumerate(zip(shape, contiguous_strides(tuple(shape)), strict=True)):
        q = row // st.substitute("z", num(1))
        out.append(ZERO if d is ONE else q if j == big[0] else q % d)
    return tuple(out)


@dataclass(frozen=True)
class KernelSlice(KernelOp):
    """Elements offset .. offset + n - 1 of input 0 (dtype `dtype`): one product of a stacked
    KernelGemvFused. An alias (`alias()`: the runtime gives it input 0's bytes from that offset,
    luminal/backends/aliasing.py), so it renders no code and no launch: its bytes are already there."""

    offset: Expression
    n: Expression
    dtype: DType
    n_inputs: ClassVar[int] = 1
    prefix: ClassVar[str] = "slice"

    def alias(self) -> tuple[int, Expression]:
        return 0, self.offset * num(self.dtype.itemsize)

    def out_dtype(self, in_dtypes):
        return self.dtype

    def out_size(self) -> Expression:
        return self.n

    def input_views(self):
        return (((self.n,), (z + self.offset,)),)

    def reference(self, ins, in_dtypes, env):
        off, n = int(self.offset.evaluate(env)), int(self.n.evaluate(env))
        return np.array(np.asarray(ins[0])[off : off + n])

    def render(self, slots) -> Kernel:
        return Kernel("", (), frozenset())


# preference order (backend.py): a slice of the stacked q/k/v GEMV before a GEMV of its own
GEMV_FUSED_OPS = (KernelSlice, KernelGemvFused, KernelAcc, KernelLoad)
