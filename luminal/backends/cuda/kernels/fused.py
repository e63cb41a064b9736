"""KernelFused: one CUDA kernel computing a whole expression of kernel ops (ruleset `fusion_grow`).

Fields: `root`, the kernel op whose result is the output buffer, and `args`, its arguments as fused
expressions (luminal/hlir/fexpr.py): each a leaf (an input buffer of this op, numbered by first
use) or another fusible kernel op computed inline. Fusible: the unary, binary, cast, constant and
iota kernels, and the reductions. The rules beside each of them (unary.egg, binary.egg, io.egg,
reduce.egg) union every way to compute a value inline into the value's FExpr classes, and this
op into the root's e-class; extraction picks where each region starts and stops, and search
ranks the plans by their measured time. fused.egg holds the shared helper rules.

Semantics: every node computes exactly what its op computes in the unfused chain, and values stay
in registers: a 16/8-bit float is computed in f32 and rounded to its dtype right after the op that
makes it (emit.py `rounded`), so every later op -- arithmetic, `%`, `<`, a cast, a reduction --
reads the value the reference computes op by op, and a fused chain equals the unfused one bit for
bit (docs/numerics.md, "Fused kernels"; f32 sums differ only by their order of additions, f32
transcendentals by CUDA's libm). `reference` runs the nodes' own reference code (`evaluate_body`).
The kernel is laid out one of three ways (emit.py has the details):
* no reduction in the body: one thread per output element (16-byte vectors when every input is
  read in order), like the plain elementwise kernels;
* the root is a reduction: a group of threads per output element strides the reduced axis;
* otherwise (an elementwise root over reductions read per row, e.g. softmax, layer norm): a group
  of threads per output row; row-level reductions are computed once per row, cooperatively,
  before the loop over the row's columns. Re-reads of the row hit L1/L2, so DRAM sees one read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from luminal.backends.cuda.kernel import Kernel, KernelOp, Launch, dim_decls, elementwise, headers, name_code, store
from luminal.backends.cuda.kernels.binary import KernelBinary
from luminal.backends.cuda.kernels.emit import BLOCK, TILE_MAX, Emitter, c_of, cvar, out_shape
from luminal.backends.cuda.kernels.io import KernelCast
from luminal.backends.cuda.kernels.reduce import KernelReduce
from luminal.backends.cuda.kernels.unary import KernelUnary
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir import fexpr
from luminal.hlir.fexpr import FArgs, FLeaf, FNode
from luminal.hlir.op import EList, Op
from luminal.shape.expr import Expression, ceil_div, num, prod
from luminal.shape.tracker import contiguous_strides


def arg_dtype(op: Op, k: int) -> DType:
    """The dtype a fusible kernel op reads its argument `k` in (its fields say it)."""
    if isinstance(op, KernelCast):
        return op.in_dtype
    if isinstance(op, (KernelUnary, KernelBinary, KernelReduce)):
        return op.dtype
    raise BackendError(f"{type(op).__name__} cannot be computed inside a fused kernel")


def leaf_dtypes(nodes, n: int, known: dict[int, DType] | None = None) -> tuple[DType, ...]:
    """The dtypes of leaves 0..n-1 of fused bodies, each from the op that reads it (`known` first)."""
    out = dict(known or {})
    for node in nodes:
        for k, a in enumerate(node.args):
            if isinstance(a, FLeaf):
                out.setdefault(a.index, arg_dtype(node.op, k))
    return tuple(out[i] for i in range(n))


def leaf_reads(nodes, offset: int = 0) -> tuple:
    """(input position = offset + leaf index, shape, strides) of every read of a leaf by a node."""
    return tuple((offset + a.index, *n.op.input_views()[k]) for n in nodes
                 for k, a in enumerate(n.args) if isinstance(a, FLeaf))  # fmt: skip


def evaluate_body(root: FNode, ins, in_dtypes, env):
    """A fused body's value as its CUDA code computes it: every node's result rounded to its dtype,
    as the unfused chain and the reference round it (docs/numerics.md)."""
    return fexpr.evaluate(root.op, root.args, list(ins), tuple(in_dtypes), env)


def group_size(lengths: list[Expression]) -> int:
    """Threads per row: the longest loop a row runs (symbolic: assume long)."""
    if any(not n.is_num for n in lengths):
        return BLOCK
    m = max((n.value for n in lengths), default=1)
    return 1 if m <= 16 else 32 if m <= 1024 else BLOCK


@dataclass(frozen=True)
class KernelFused(KernelOp):
    root: Op
    args: FArgs
    prefix: ClassVar[str] = "fused"

    @property
    def n_inputs(self) -> int:  # type: ignore[override]
        return fexpr.n_leaves(self.args)

    def nodes(self) -> list[FNode]:
        return list(fexpr.ops((FNode(self.root, self.args),)))

    def in_dtypes(self) -> tuple[DType, ...]:
        """Each input's dtype, from the op that reads it."""
        return leaf_dtypes(self.nodes(), self.n_inputs)

    def out_dtype(self, in_dtypes):
        dts = fexpr.dtypes(self.args, tuple(in_dtypes))
        return self.root.out_dtype(tuple(dts[id(a)] for a in self.args))

    def out_size(self) -> Expression:
        return self.root.out_size()

    def dim_names(self) -> frozenset[str]:
        return frozenset().union(*(n.op.dim_names() for n in self.nodes()))

    def reference(self, ins, in_dtypes, env):
        return evaluate_body(FNode(self.root, self.args), ins, in_dtypes, env)

    def input_views(self):
        raise BackendError("KernelFused reads an input through several views: use input_reads()")

    def input_reads(self):
        """(input position, shape, strides) of every read of an input by a node of the body."""
        return leaf_reads(self.nodes())

    # -- code -----------------------------------------------------------------------------------------
    def render(self, slots) -> Kernel:
        in_dts = self.in_dtypes()
        odt = self.out_dtype(in_dts)
        hdrs = headers(odt, *fexpr.dtypes(self.args, in_dts).values())
        decls = dim_decls(self.dim_names(), slots)
        root = FNode(self.root, self.args)
        if not any(isinstance(n.op, KernelReduce) for n in self.nodes()):
            em = Emitter(in_dts, 1, coords=False)
            name, _, _ = em.value(root, cvar("i"))
            body = "".join(f"      {ln}\n" for ln in em.root.lines) + f"      out[i] = {store(odt, name)};"
            return elementwise(self.prefix, odt, list(in_dts), self.out_size(), body, decls, hdrs,
                               vector=em.flat_loads and not em.uses_pos)  # fmt: skip
        return self._rows(root, in_dts, odt, decls, hdrs)

    def _rows(self, root: FNode, in_dts, odt: DType, decls: str, hdrs) -> Kernel:
        if isinstance(self.root, KernelReduce):
            row_shape, ncol = self.root.shape, None
        else:
            shape = out_shape(self.root)
            row_shape, ncol = (shape[:-1], shape[-1]) if shape else ((), None)
        loops = ([] if ncol is None else [ncol]) + [n.op.iters for n in self.nodes() if isinstance(n.op, KernelReduce)]
        g = group_size(loops)
        rpb = BLOCK // g
        rvars = tuple(cvar(f"y{j}") for j in range(len(row_shape)))
        head = [f"  {ln}" for ln in row_coords(row_shape)]

        def put(name: str, col: str | None) -> list[str]:
            if col is None:
                return [f"if (lane == 0) out[row] = {store(odt, name)};"]
            return [f"out[row * ncol + {col}] = {store(odt, name)};"]

        lines, tail = row_code(root, in_dts, g, rvars, ncol, put)
        params = "".join(f", const {d.cuda}* __restrict__ in{k}" for k, d in enumerate(in_dts))
        code = (f'extern "C" __global__ void __launch_bounds__({BLOCK}) KNAME({odt.cuda}* __restrict__ out{params}, '
                f"const long long* __restrict__ dims) {{\n{decls}"
                f"  const long long rows = {c_of(prod(row_shape))};\n"
                f"  const long long row = (long long)blockIdx.x * {rpb} + threadIdx.x / {g};\n"
                f"  const int lane = threadIdx.x % {g};\n"
                "  if (row >= rows) return;  // uniform per row group\n"
                + "".join(f"{ln}\n" for ln in (*head, *(f"  {x}" for x in (*lines, *tail))))
                + "}\n")  # fmt: skip
        name, code = name_code(self.prefix, code)
        return Kernel(code, (Launch(name, ceil_div(prod(row_shape), num(rpb)), BLOCK),), hdrs)


def element_values(
    roots: tuple[FNode, ...], in_dts: tuple[DType, ...], shape: EList, base: int
) -> tuple[list[str], list[str]]:
    """(statements, C value of each root) of fused bodies `roots` (values of row-major `shape`) at
    flat index `i`, one thread per element, leaf k read from parameter in{base + k}: the index or the
    values a gather / in-place scatter computes where it uses them. A row reduction in a body
    (q/k-norm over head_dim) runs serially in the element's thread, at its coordinates."""
    if not any(isinstance(n.op, KernelReduce) for n in fexpr.ops(roots)):
        em = Emitter(in_dts, 1, coords=False, base=base)
        return em.root.lines, [em.value(r, cvar("i"))[0] for r in roots]
    em = Emitter(in_dts, 1, coords=True, strict=False, base=base, tile_max=0)  # a row group of one, no tiles
    names = [em.value(r, tuple(cvar(f"y{j}") for j in range(len(shape))))[0] for r in roots]
    return ["const long long row = i;", "const int lane = 0;", *row_coords(shape), *em.root.lines], names


def row_coords(row_shape: EList) -> list[str]:
    """C setting y0, y1, .. (the coordinates `cvar("y{j}")`) of row `row` in a row-major `row_shape`."""
    row = cvar("row")
    out = []
    for j, (d, st) in enumerate(zip(row_shape, contiguous_strides(tuple(row_shape)), strict=True)):
        q = row // st.substitute("z", num(1))
        out.append(f"const long long y{j} = {c_of(q if j == 0 else q % d)};")
    return out


def row_code(
    root: FNode, in_dts: tuple[DType, ...], g: int, rvars: tuple, ncol: Expression | None,
    put: Callable[[str, str | None], list[str]], base: int = 0, acc=None, tile_max: int = TILE_MAX, load_base: int = 0,
) -> tuple[list[str], list[str]]:  # fmt: skip
    """The statements computing `root` over one row of a row kernel: (prelude, tail). A group of g
    threads (`lane` < g) runs the row; row-level reductions are computed cooperatively in the
    prelude, then the tail loops over the row's ncol columns (none: the row is one value) and runs
    `put(C value, column variable or None)` at each. Two passes: the first finds the row-level
    reductions and the order their loops close in, the second emits them first."""

    def emit(first: list | None) -> tuple[Emitter, list[str]]:
        em = Emitter(in_dts, g, coords=True, strict=first is not None, base=base, acc=acc, tile_max=tile_max,
                     load_base=load_base)  # fmt: skip
        for node, pos in first or ():  # row-level reductions before any loop that reads them
            em.value(node, pos)
        if ncol is None:
            name, _, _ = em.value(root, rvars)
            return em, put(name, None)
        cols = em.row_loop(ncol)  # the row's columns: one more row loop, storing the root's value
        name, _, _ = em.value(root, (*rvars, cvar(cols.var)))
        return em, [f"const long long ncol = {c_of(ncol)};", *em.close_loop(cols, ncol, put(name, cols.var))]

    em, tail = emit(emit(None)[0].coop)
    return [*em.decls, *em.root.lines], tail


FUSED_KERNELS = (KernelFused,)
