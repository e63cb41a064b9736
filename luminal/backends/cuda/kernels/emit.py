"""C for a fused body (KernelFused, fused.py): loops, positions and hoisting.

Every node of a body is evaluated at a *position*: in the elementwise layout a flat logical index
(one thread per output element), in the row layouts a tuple of coordinates of the node's shape.
A node reads argument k through its view k (`input_views()[k]`): the physical index of the view
at the node's position is the argument's flat position (its result is a virtual contiguous
buffer), which for a row layout is turned back into the argument's coordinates (directly when the
view only permutes, broadcasts or drops axes; by div/mod otherwise).

Values are C locals of their dtype's compute type (f32 for 16/8-bit floats), each computed by the
op's own `inline` C and, for a 16/8-bit float, rounded to its dtype at once (`rounded`: the value
the unfused op would store), so every consumer reads the number the reference computes, op by op
(docs/numerics.md, "Fused kernels"). A local lives in the innermost loop its position depends
on (loop-invariant values are hoisted: a reduction whose position does not depend on the row's
column loop is computed once per row, before that loop) and is shared by every use at the same
position (CSE). Row loops of a literal length of at most TILE_MAX iterations per thread are
unrolled and keep their values in per-thread arrays (registers), shared by every row loop over that
length: a row is read from memory once, whatever number of passes (max, sum, output) the body
makes over it. A row-level float sum in such a loop adds a thread's values pairwise, then combines
the threads' partial sums with compensated (TwoSum) adds, like the reduce kernels; a 16/8-bit sum
is rounded to its dtype once, at its end.

Row layouts: a group of G threads (1, a warp or the whole 256-thread block) per row. A reduction
computed at row level is cooperative: the G threads stride its loop and combine their partial
results with warp shuffles (and shared memory), in a fixed order, so every thread holds the same
value. Reductions deeper in a loop (their position depends on a loop variable) run serially in
their thread. Accumulation follows the unfused reduce kernels exactly (reduce.py `parts`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from luminal.backends.cuda.kernel import EW_BLOCK, compute_type, load, store
from luminal.backends.cuda.kernels.io import KernelCast, KernelConstant, KernelIota
from luminal.backends.cuda.kernels.reduce import KernelMaxReduce, KernelReduce, KernelSumReduce
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir.fexpr import FExpr, FLeaf, FNode
from luminal.hlir.op import EList, Op
from luminal.shape.expr import ONE, ZERO, Expression, Z, z
from luminal.shape.tracker import ShapeTracker, contiguous_strides, linear_step

BLOCK = EW_BLOCK
Position = Expression | tuple  # flat index, or coordinates


def cvar(name: str) -> Expression:
    """A codegen variable (loop index, row coordinate): `@` keeps it apart from every dim symbol."""
    return Expression("var", ("@" + name,))


def spell(v: str) -> str:
    return v[1:] if v.startswith("@") else f"d_{v}"


def c_of(e: Expression) -> str:
    return e.to_c(spell)


def out_shape(op: Op) -> EList:
    """Shape of a fusible op's result (its buffer is that shape, row-major)."""
    if isinstance(op, KernelIota):
        return (op.length,)
    if isinstance(op, KernelConstant):
        return ()
    shape = getattr(op, "shape", None)
    if shape is None:
        raise BackendError(f"{type(op).__name__} cannot be computed inside a fused kernel")
    return shape


def merged_view(shape: EList, strides: EList) -> tuple[EList, EList]:
    """The same view with size-1 axes dropped and adjacent linear axes merged (fewer div/mods)."""
    out_sh: list[Expression] = []
    out_st: list[Expression] = []
    for d, st in zip(shape, strides, strict=True):
        if d is ONE:
            continue
        if out_sh:
            c_in, c_out = linear_step(st), linear_step(out_st[-1])
            if c_in is not None and c_out is not None and c_out is c_in * d:
                out_sh[-1] = out_sh[-1] * d
                out_st[-1] = c_in * z
                continue
        out_sh.append(d)
        out_st.append(st)
    return tuple(out_sh), tuple(out_st)


def flat_read(pos: Expression, view: tuple[EList, EList]) -> Expression:
    """Physical index a view reads at flat logical position `pos`."""
    sh, st = merged_view(*view)
    return ShapeTracker(sh, st).index_expression().substitute(Z, pos)


def coord_read(pos: tuple, view: tuple[EList, EList]) -> Expression:
    """Physical index a view reads at coordinates `pos` (one per view axis)."""
    out: Expression = ZERO
    for x, d, st in zip(pos, *view, strict=True):
        out = out + st.substitute(Z, ZERO if d is ONE else x)
    return out


def unravel(phys: Expression, pos: tuple, view: tuple[EList, EList], shape: EList) -> tuple:
    """Coordinates in a row-major buffer of `shape` of the index the view reads at `pos`: axis to
    axis when the view permutes / broadcasts / drops axes of the buffer, else by div/mod."""
    rm = [linear_step(s) for s in contiguous_strides(shape)]
    used: dict[int, Expression] = {}
    for x, d, st in zip(pos, *view, strict=True):
        c = linear_step(st)
        if d is ONE or c is ZERO:
            continue
        m = next((m for m in range(len(shape)) if m not in used and rm[m] is c and shape[m] is d), None)
        if c is None or m is None:
            break
        used[m] = x
    else:
        coords = tuple(used.get(m, ZERO) for m in range(len(shape)))
        check: Expression = ZERO
        for y, r in zip(coords, rm, strict=True):
            check = check + y * r
        if check is phys and all(m in used or shape[m] is ONE for m in range(len(shape))):
            return coords
    out = []
    for m, (d, r) in enumerate(zip(shape, rm, strict=True)):
        q = phys // r
        out.append(q if m == 0 else q % d)
    return tuple(out)


@dataclass(eq=False)
class Scope:
    """A block of statements: the row prelude, or the body of a loop over `var`. A *tile* scope
    (tile = J > 0) is a row loop unrolled J times per thread: its values are per-thread arrays
    indexed by the unrolled iteration j, and every row loop over the same length shares it (each
    physical loop's statements go to the top of `stack`), so a value computed in one such loop
    (an input element, exp(x - max)) is reused from registers by the next."""

    parent: Scope | None
    depth: int
    var: str = ""
    lines: list[str] = field(default_factory=list)
    tile: int = 0
    stack: list[list[str]] = field(default_factory=list)

    def put(self, line: str) -> None:
        (self.stack[-1] if self.tile else self.lines).append(line)


INVARIANCE_MAX = 1024  # loops longer than this are not checked for invariant positions (codegen time)
TILE_MAX = 32  # a row loop of at most this many iterations per thread keeps its values in registers


class Emitter:
    """Builds the statements of one fused kernel; see the module docstring."""

    def __init__(self, in_dtypes: tuple[DType, ...], group: int, coords: bool, strict: bool = True, base: int = 0,
                 acc: Callable[[FNode, Position], str] | None = None, tile_max: int = TILE_MAX,
                 load_base: int = 0):  # fmt: skip
        """`in_dtypes`: the body's leaves; leaf i is the kernel parameter in{base + i}. `acc`: C name of
        a value the kernel computes itself (a node whose op has `accumulator`, e.g. a GEMV's dot
        product in its epilogue) at a position; the hook checks the position is the one it holds."""
        self.in_dtypes = in_dtypes
        self.tile_max = tile_max  # longest row loop per thread kept in registers (TILE_MAX unless told)
        self.base = base
        self.load_base = load_base  # parameter number of a load node's input 0 (`_loads`)
        self.acc = acc
        self.group = group  # threads per row (cooperative reductions at row level)
        self.coords = coords
        self.strict = strict
        self.root = Scope(None, 0)
        self.scope_of: dict[str, Scope] = {}
        self.extent: dict[str, int] = {}  # loop variable (as in positions) -> its literal trip count
        self.memo: dict[tuple, tuple[str, DType, Scope]] = {}
        self.where: dict[tuple, list[str]] = {}  # tile values: the physical loop body that computes them
        self.decls: list[str] = []  # per-thread arrays of tile scopes, declared before any row loop
        self.n = 0
        self.flat_loads = True  # every leaf read as in{k}[i] (the elementwise layout may vectorize)
        self.uses_pos = False
        self.coop: list[tuple[FNode, Position]] = []  # row-level reductions, in the order their loops closed

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def open(self, parent: Scope, var: str) -> Scope:
        sc = Scope(parent, parent.depth + 1, var)
        self.scope_of["@" + var] = sc
        return sc

    def local(self, sc: Scope, dt: DType, name: str) -> str:
        """The C spelling of a new value `name` placed in `sc` (an array element in a tile scope)."""
        if not sc.tile:
            return name
        self.decls.append(f"{compute_type(dt)} {name}[{sc.tile}];")
        return f"{name}[j]"

    # -- row loops ------------------------------------------------------------------------------------
    def row_loop(self, n: Expression) -> Scope:
        """Open a loop of the row group over positions 0..n-1 (tiled when n is a small literal)."""
        g = self.group
        if n.is_num and -(-n.value // g) <= self.tile_max:
            var = f"t{n.value}"
            sc = self.scope_of.get("@" + var)
            if sc is None:
                sc = self.open(self.root, var)
                sc.tile = max(1, -(-n.value // g))
                self.extent["@" + var] = n.value
            sc.stack.append([])
            return sc
        sc = self.open(self.root, self.fresh("k"))
        if n.is_num:
            self.extent["@" + sc.var] = n.value
        return sc

    def close_loop(self, sc: Scope, n: Expression, tail: list[str]) -> list[str]:
        """The text of a loop opened by row_loop, with `tail` after its body."""
        v, g = sc.var, self.group
        if sc.tile:
            body = sc.stack.pop()
            return ["#pragma unroll", f"for (int j = 0; j < {sc.tile}; ++j) {{",
                    f"  const long long {v} = lane + (long long)j * {g};", f"  if ({v} < {c_of(n)}) {{",
                    *(f"    {ln}" for ln in (*body, *tail)), "  }", "}"]  # fmt: skip
        return ["#pragma unroll 4", f"for (long long {v} = lane; {v} < {c_of(n)}; {v} += {g}) {{",
                *(f"  {ln}" for ln in (*sc.lines, *tail)), "}"]  # fmt: skip

    def deepest(self, e: Expression | tuple, *scopes: Scope) -> Scope:
        names = set().union(*(x.vars() for x in (e if isinstance(e, tuple) else (e,))))
        cands = [self.scope_of[v] for v in names if v in self.scope_of] + list(scopes)
        return max(cands, key=lambda s: s.depth, default=self.root)

    # -- values ---------------------------------------------------------------------------------------
    def value(self, e: FExpr, pos: Position) -> tuple[str, DType, Scope]:
        """(C local, dtype, scope) of `e` at `pos` (for a leaf, `pos` is the physical index)."""
        key = (id(e), pos)
        hit = self.memo.get(key)
        if hit is not None:
            body = self.where.get(key)
            if body is None or body is hit[2].stack[-1] or not any(body is b for b in hit[2].stack):
                return hit
            # computed in a loop that runs after the current one. A final pass evaluates the
            # row-level reductions first (in `coop` order), so only a first pass gets here
            if self.strict:
                raise BackendError("fused kernel: a value is used before the loop computing it (codegen invariant)")
        if isinstance(e, FLeaf) or _loads(e):
            if isinstance(e, FLeaf):
                dt, param = self.in_dtypes[e.index], e.index + self.base
            else:
                dt, param = e.op.dtype, e.op.index + self.load_base
            sc = self.deepest(pos)
            name = self.fresh("l")
            ix = c_of(pos)
            if ix != "i":
                self.flat_loads = False
            ref = self.local(sc, dt, name)
            val = load(dt, f"in{param}[{ix}]")
            sc.put(f"{ref} = {val};" if sc.tile else f"const {compute_type(dt)} {name} = {val};")
            res = (ref, dt, sc)
        elif getattr(e.op, "accumulator", False):
            if self.acc is None:
                raise BackendError(f"{type(e.op).__name__} outside the kernel that computes it (codegen invariant)")
            res = self.accumulator(e, pos)
        elif isinstance(e.op, KernelReduce):
            res = self.reduce(e, pos)
        else:
            res = self.elementwise(e, pos)
        self.memo[key] = res
        if res[2].tile:
            self.where[key] = res[2].stack[-1]
        return res

    def arg_pos(self, node: FNode, k: int, pos: Position) -> Position:
        view = node.op.input_views()[k]
        arg = node.args[k]
        if not self.coords:
            return flat_read(pos, view)
        phys = coord_read(pos, view)
        return phys if isinstance(arg, FLeaf) or _loads(arg) else unravel(phys, pos, view, out_shape(arg.op))

    def elementwise(self, e: FNode, pos: Position) -> tuple[str, DType, Scope]:
        args = [self.value(a, self.arg_pos(e, k, pos)) for k, a in enumerate(e.args)]
        dt = e.op.out_dtype(tuple(d for _, d, _ in args))
        flat = pos if not self.coords else (pos[0] if pos else ZERO)  # only Iota (1-D) reads its position
        if isinstance(e.op, KernelIota):
            self.uses_pos = True
        sc = self.deepest(flat if isinstance(e.op, KernelIota) else (), *(s for _, _, s in args))
        name = self.fresh("v")
        ref = self.local(sc, dt, name)
        code = fused_inline(e.op, ref, [a for a, _, _ in args], c_of(flat), dt)
        sc.put(code if sc.tile else f"{compute_type(dt)} {name}; {code}")
        return ref, dt, sc

    def accumulator(self, e: FNode, pos: Position) -> tuple[str, DType, Scope]:
        """A value the kernel computes itself (a GEMV's f32 dot product, summed wide and rounded once,
        like the reference's matmul), rounded to its dtype where the unfused plan stores it."""
        dt = e.op.out_dtype(())
        acc = self.acc(e, pos)  # type: ignore[misc]
        if not narrow(dt):
            return acc, dt, self.root
        name = self.fresh("v")
        self.root.put(f"const {compute_type(dt)} {name} = {rounded(dt, acc)};")
        return name, dt, self.root

    def invariant(self, pos: Position) -> Position:
        """`pos` without the loop variables it only seems to depend on: a coordinate that simplifies to
        one expression at every value of a literal loop (`(256*y + (t + 128) % 256) / 256` is y for
        t in 0..255) does not depend on that loop. Reached through a view that permutes within a row
        (rotate-half), a row reduction then stays at row level: computed once per row, shared with
        its other uses, instead of serially for every element."""
        coords = pos if isinstance(pos, tuple) else (pos,)
        for v in sorted(set().union(*(c.vars() for c in coords))):
            n = self.extent.get(v)
            if n is None or n > INVARIANCE_MAX:
                continue
            if n == 0:
                continue
            first = tuple(c.substitute(v, 0) for c in coords)
            # the first value of v at which a coordinate differs ends the check (most do at v = 1)
            if all(tuple(c.substitute(v, k) for c in coords) == first for k in range(1, n)):
                coords = first
        return coords if isinstance(pos, tuple) else coords[0]

    def reduce(self, e: FNode, pos: Position) -> tuple[str, DType, Scope]:
        op: KernelReduce = e.op  # type: ignore[assignment]
        dt = op.dtype
        pos = self.invariant(pos)
        outer = self.deepest(pos)
        coop = outer is self.root  # row level: the whole row group runs the loop
        body = self.row_loop(op.iters) if coop else self.open(outer, self.fresh("k"))
        x, xdt, xsc = self.value(e.args[0], self.arg_pos(e, 0, (*pos, cvar(body.var))))
        if xsc.depth > body.depth:
            raise BackendError("fused reduction: an argument escaped its loop (codegen invariant broken)")
        wdt = register_dtype(dt)  # the reduction runs over the registers' type: f32 for 16/8-bit floats
        p = replace(op, dtype=wdt).parts()
        bits = isinstance(op, KernelMaxReduce) and dt.is_float
        ld = p["load"].replace("in0[{ix}]", as_bits(wdt, x) if bits else x)
        final = from_bits(wdt, p["final"]) if bits else p["final"]
        res = self.fresh("red")
        ref = self.local(outer, dt, res)
        acc = [f"const T v = {ld};", p["add"]]
        pre: list[str] = []
        if coop and body.tile > 1 and isinstance(op, KernelSumReduce) and dt.is_float:
            # a thread's (<= TILE_MAX) register values summed pairwise in the accumulator type, then
            # the compensated combine across the group: the error stays a few ulps of the sum of |v|
            pre = [f"T part[{body.tile}] = {{}};"]
            acc = [f"part[j] = {ld};"]
        if coop:
            loop = self.close_loop(body, op.iters, acc)
            if pre:
                loop += ["#pragma unroll", f"for (int w = 1; w < {body.tile}; w *= 2) {{", "#pragma unroll",
                         f"  for (int j = 0; j + w < {body.tile}; j += 2 * w) part[j] += part[j + w];", "}",
                         "s = part[0];"]  # fmt: skip
        else:
            loop = ["#pragma unroll 4", f"for (long long {body.var} = 0; {body.var} < iters; ++{body.var}) {{",
                    *(f"  {ln}" for ln in (*body.lines, *acc)), "}"]  # fmt: skip
        lines = ([] if outer.tile else [f"{compute_type(dt)} {res};"]) + [
            "{", f"  typedef {p['T']} T;", f"  const long long iters = {c_of(op.iters)};",
            f"  T s = {p['init']}, c = {p['zero_c']};", *(f"  {ln}" for ln in (*pre, *loop))]  # fmt: skip
        if coop and self.group > 1:
            lines += _combine(p, self.group, self.fresh("sh"))
        if isinstance(op, KernelSumReduce):  # a max is one of its (rounded) operands already
            final = rounded(dt, final)
        lines += [f"  {ref} = {final};", "}"]
        for ln in lines:
            outer.put(ln)
        if coop:
            self.coop.append((e, pos))
        return ref, dt, outer


def _loads(e: FExpr) -> bool:
    """A node that reads one of the fused op's own inputs like a leaf (parameter load_base +
    op.index, of op.dtype): a value the body must not compute inline (gemvfused.py KernelLoad)."""
    return isinstance(e, FNode) and getattr(e.op, "loads_input", False)


def _combine(p: dict, g: int, sh: str) -> list[str]:
    """Group all-reduce of (s, c) over g lanes in a fixed order: every lane ends with lane 0's result."""
    has_c = "c2" in p["comb"]
    out = ["  for (int off = 16; off > 0; off >>= 1) {", "    const T s2 = __shfl_down_sync(0xffffffffu, s, off);"]
    if has_c:
        out.append("    const T c2 = __shfl_down_sync(0xffffffffu, c, off);")
    out += [f"    {p['comb']}", "  }"]
    if g == 32:
        out.append("  s = __shfl_sync(0xffffffffu, s, 0);")
        if has_c:
            out.append("  c = __shfl_sync(0xffffffffu, c, 0);")
        return out
    w = g // 32
    out += [f"  __shared__ T {sh}_s[{w}], {sh}_c[{w}];",
            f"  if ((threadIdx.x & 31) == 0) {{ {sh}_s[threadIdx.x >> 5] = s; {sh}_c[threadIdx.x >> 5] = c; }}",
            "  __syncthreads();", f"  s = {sh}_s[0]; c = {sh}_c[0];",
            f"  for (int w = 1; w < {w}; ++w) {{",
            f"    const T s2 = {sh}_s[w]; const T c2 = {sh}_c[w]; {p['comb']}", "  }"]  # fmt: skip
    return out


def narrow(dt: DType) -> bool:
    """A 16/8-bit float: computed in f32 registers, rounded to the dtype after every op."""
    return dt.is_float and dt.bits < 32


def register_dtype(dt: DType) -> DType:
    """The type a fused kernel's registers hold values of `dt` in (and a reduction accumulates in):
    f32 for 16/8-bit floats, whose values they hold exactly."""
    return DType.f32 if narrow(dt) else dt


def wide(dt: DType) -> DType:
    """The dtype a fused body holds a value of `dt` in between its nodes, as the bodies' reference
    models see it (`hold` of fexpr.evaluate): `dt` itself, because every node's 16/8-bit result is
    rounded to its dtype (`rounded`), exactly as the reference rounds it. The identity; kept for
    gemvfused.py's `reference`, which passes it as `hold`."""
    return dt


def rounded(dt: DType, x: str) -> str:
    """C of compute-type value `x` rounded to `dt` and held in the compute type again (through the
    storage type: one cvt to nearest even), for a 16/8-bit float; `x` itself otherwise."""
    return load(dt, store(dt, x)) if narrow(dt) else x


def fused_inline(op: Op, out: str, args: list[str], pos: str, dt: DType) -> str:
    """C statements setting `out` (of dtype `dt`) to `op` of the compute-type registers `args`, as
    inside a fused body: the op's own `inline` in the compute type, its 16/8-bit float result then
    rounded to `dt` -- the value the unfused op stores and the reference computes. A cast's result is
    rounded by the conversion itself and a constant's literal is exact in its dtype: no second cvt."""
    code = op.inline(out, args, pos, wide=True)  # type: ignore[attr-defined]
    if narrow(dt) and not isinstance(op, (KernelCast, KernelConstant)):
        code += f" {out} = {rounded(dt, out)};"
    return code


_BITS = {
    DType.f32: ("__float_as_uint({})", "__uint_as_float({})"),
    DType.f64: ("((unsigned long long)__double_as_longlong({}))", "__longlong_as_double((long long)({}))"),
    DType.f16: ("__half_as_ushort({})", "__ushort_as_half({})"),
    DType.bf16: ("__bfloat16_as_ushort({})", "__ushort_as_bfloat16({})"),
}


def as_bits(dt: DType, x: str) -> str:
    if dt not in _BITS:
        raise BackendError(f"a fused max over {dt} is not supported")
    return _BITS[dt][0].format(x)


def from_bits(dt: DType, b: str) -> str:
    if dt not in _BITS:
        raise BackendError(f"a fused max over {dt} is not supported")
    return _BITS[dt][1].format(b)
