"""C for a fused body (KernelFused, fused.py): loops, positions and hoisting.

Every node of a body is evaluated at a *position*: in the elementwise layout a flat logical index
(one thread per output element), in the row layouts a tuple of coordinates of the node's shape.
A node reads argument k through its view k (`input_views()[k]`): the physical index of the view
at the node's position is the argument's flat position (its result is a virtual contiguous
buffer), which for a row layout is turned back into the argument's coordinates (directly when the
view only permutes, broadcasts or drops axes; by div/mod otherwise).

Values are C locals of their dtype's storage type, each computed by the op's own `inline` C and
so rounded exactly as the unfused kernel would round it. A local lives in the innermost loop its
position depends on (loop-invariant values are hoisted: a reduction whose position does not
depend on the row's column loop is computed once per row, before that loop) and is shared by
every use at the same position (CSE).

Row layouts: a group of G threads (1, a warp or the whole 256-thread block) per row. A reduction
computed at row level is cooperative: the G threads stride its loop and combine their partial
results with warp shuffles (and shared memory), in a fixed order, so every thread holds the same
value. Reductions deeper in a loop (their position depends on a loop variable) run serially in
their thread. Accumulation follows the unfused reduce kernels exactly (reduce.py `parts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from luminal.backends.cuda.kernel import EW_BLOCK
from luminal.backends.cuda.kernels.io import KernelConstant, KernelIota
from luminal.backends.cuda.kernels.reduce import KernelMaxReduce, KernelReduce
from luminal.dtype import DType
from luminal.errors import BackendError
from luminal.hlir.fexpr import FExpr, FLeaf, FNode
from luminal.hlir.op import EList, Op
from luminal.shape.expr import ONE, ZERO, Expression, Z, z
from luminal.shape.tracker import ShapeTracker, contiguous_strides

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


def _linear(st: Expression) -> Expression | None:
    """c when the stride is c * z (c free of z; 0 included), else None."""
    c = st.substitute(Z, 1) - st.substitute(Z, 0)
    if st.substitute(Z, 0) is not ZERO or st is not c * z or Z in c.vars():
        return None
    return c


def merged_view(shape: EList, strides: EList) -> tuple[EList, EList]:
    """The same view with size-1 axes dropped and adjacent linear axes merged (fewer div/mods)."""
    out_sh: list[Expression] = []
    out_st: list[Expression] = []
    for d, st in zip(shape, strides, strict=True):
        if d is ONE:
            continue
        if out_sh:
            c_in, c_out = _linear(st), _linear(out_st[-1])
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
    rm = [_linear(s) for s in contiguous_strides(shape)]
    used: dict[int, Expression] = {}
    for x, d, st in zip(pos, *view, strict=True):
        c = _linear(st)
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
    """A block of statements: the row prelude, or the body of a loop over `var`."""

    parent: Scope | None
    depth: int
    var: str = ""
    lines: list[str] = field(default_factory=list)


class Emitter:
    """Builds the statements of one fused kernel; see the module docstring."""

    def __init__(self, in_dtypes: tuple[DType, ...], group: int, coords: bool):
        self.in_dtypes = in_dtypes
        self.group = group  # threads per row (cooperative reductions at row level)
        self.coords = coords
        self.root = Scope(None, 0)
        self.scope_of: dict[str, Scope] = {}
        self.memo: dict[tuple, tuple[str, DType, Scope]] = {}
        self.n = 0
        self.flat_loads = True  # every leaf read as in{k}[i] (the elementwise layout may vectorize)
        self.uses_pos = False

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def open(self, parent: Scope, var: str) -> Scope:
        sc = Scope(parent, parent.depth + 1, var)
        self.scope_of["@" + var] = sc
        return sc

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
            return hit
        if isinstance(e, FLeaf):
            dt = self.in_dtypes[e.index]
            sc = self.deepest(pos)
            name = self.fresh("l")
            ix = c_of(pos)
            if ix != "i":
                self.flat_loads = False
            sc.lines.append(f"const {dt.cuda} {name} = in{e.index}[{ix}];")
            res = (name, dt, sc)
        elif isinstance(e.op, KernelReduce):
            res = self.reduce(e, pos)
        else:
            res = self.elementwise(e, pos)
        self.memo[key] = res
        return res

    def arg_pos(self, node: FNode, k: int, pos: Position) -> Position:
        view = node.op.input_views()[k]
        arg = node.args[k]
        if not self.coords:
            return flat_read(pos, view)
        phys = coord_read(pos, view)
        return phys if isinstance(arg, FLeaf) else unravel(phys, pos, view, out_shape(arg.op))

    def elementwise(self, e: FNode, pos: Position) -> tuple[str, DType, Scope]:
        args = [self.value(a, self.arg_pos(e, k, pos)) for k, a in enumerate(e.args)]
        dt = e.op.out_dtype(tuple(d for _, d, _ in args))
        flat = pos if not self.coords else (pos[0] if pos else ZERO)  # only Iota (1-D) reads its position
        if isinstance(e.op, KernelIota):
            self.uses_pos = True
        sc = self.deepest(flat if isinstance(e.op, KernelIota) else (), *(s for _, _, s in args))
        name = self.fresh("v")
        sc.lines.append(f"{dt.cuda} {name}; " + e.op.inline(name, [a for a, _, _ in args], c_of(flat)))
        return name, dt, sc

    def reduce(self, e: FNode, pos: Position) -> tuple[str, DType, Scope]:
        op: KernelReduce = e.op  # type: ignore[assignment]
        dt = op.dtype
        outer = self.deepest(pos)
        coop = outer is self.root and self.group > 1
        kname = self.fresh("k")
        body = self.open(outer, kname)
        k = cvar(kname)
        x, xdt, xsc = self.value(e.args[0], self.arg_pos(e, 0, (*pos, k)))
        if xsc.depth > body.depth:
            raise BackendError("fused reduction: an argument escaped its loop (codegen invariant broken)")
        p = op.parts()
        src = as_bits(xdt, x) if isinstance(op, KernelMaxReduce) and dt.is_float else x
        ld = p["load"].replace("in0[{ix}]", src)
        final = p["final"]
        if isinstance(op, KernelMaxReduce) and dt.is_float:
            final = from_bits(dt, final)
        res = self.fresh("red")
        g = self.group if coop else 1
        start, step = ("lane", g) if coop else ("0", 1)
        lines = [f"{dt.cuda} {res};", "{", f"  typedef {p['T']} T;", f"  const long long iters = {c_of(op.iters)};",
                 f"  T s = {p['init']}, c = {p['zero_c']};", "#pragma unroll 4",
                 f"  for (long long {kname} = {start}; {kname} < iters; {kname} += {step}) {{",
                 *(f"    {ln}" for ln in body.lines), f"    const T v = {ld};", f"    {p['add']}", "  }"]  # fmt: skip
        if g > 1:
            lines += _combine(p, g, self.fresh("sh"))
        lines += [f"  {res} = {final};", "}"]
        outer.lines.extend(lines)
        return res, dt, outer


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
