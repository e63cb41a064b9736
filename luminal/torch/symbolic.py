"""torch's symbolic sizes (SymInt / sympy) as luminal dims, and solving dims from concrete shapes.

Every export `Dim` and Dynamo SymInt is a sympy expression over symbols such as `s27`; it becomes a
luminal Expression over dims of the same name, affine forms (`2*s`, `s + 1`) and the floor-division,
modulo, min and max that torch derives from them included. At run time the dims are solved from the
input shapes (and SymInt arguments), so one compiled plan serves every length inside the range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy
import torch
from torch.utils._sympy import functions as symf

from luminal.errors import InputError, ShapeError
from luminal.shape import expr as E
from luminal.shape.expr import Expression


def to_expr(x, literal: Mapping[str, int] | None = None) -> Expression:
    """An int, SymInt or sympy expression as a luminal Expression; a symbol named in `literal` is
    that number (a dim the translation specialized: luminal/torch/translate.py)."""
    if isinstance(x, torch.SymInt):
        x = x.node.expr
    if isinstance(x, (int, sympy.Integer)) and not isinstance(x, bool):
        return E.expr(int(x))
    if isinstance(x, Expression):
        return x
    if isinstance(x, sympy.Symbol):
        return E.expr(literal[x.name]) if literal and x.name in literal else E.dim(x.name)
    if isinstance(x, sympy.Add):
        out = E.expr(0)
        for a in x.args:
            out = out + to_expr(a, literal)
        return out
    if isinstance(x, sympy.Mul):
        out = E.expr(1)
        for a in x.args:
            out = out * to_expr(a, literal)
        return out
    args = [to_expr(a, literal) for a in x.args] if isinstance(x, sympy.Basic) else []
    # floor-division and modulo of non-negative sizes: C truncation equals floor there
    if isinstance(x, symf.FloorDiv | symf.CleanDiv):
        return E.div(args[0], args[1])
    if isinstance(x, symf.CeilDiv):
        return E.ceil_div(args[0], args[1])
    if isinstance(x, symf.Mod | symf.PythonMod):
        return E.mod(args[0], args[1])
    if isinstance(x, symf.Max | sympy.Max):
        return _fold(E.maximum, args)
    if isinstance(x, symf.Min | sympy.Min):
        return _fold(E.minimum, args)
    raise ShapeError(f"symbolic size {x} ({type(x).__name__}) has no luminal equivalent")


def _fold(f, args: list[Expression]) -> Expression:
    out = args[0]
    for a in args[1:]:
        out = f(out, a)
    return out


def solve_dims(pairs: Iterable[tuple[Expression, int]], env: Mapping[str, int] | None = None) -> dict[str, int]:
    """Dim values that make every `expr == size` pair hold: bare dims first, then one unknown at a
    time from affine forms (`a*s + b`, probed at two points and verified). InputError if a pair
    contradicts the others or a dim stays unknown."""
    out = dict(env or {})
    pairs = list(pairs)
    for e, n in pairs:
        if e.op == "var":
            prev = out.setdefault(e.args[0], int(n))
            if prev != n:
                raise InputError(f"dim {e.args[0]} is {prev} from one input and {n} from another")
    progress = True
    while progress:
        progress = False
        for e, n in pairs:
            unknown = sorted(e.dims() - set(out))
            if len(unknown) != 1:
                continue
            s = unknown[0]
            b = int(e.evaluate({**out, s: 0}))
            a = int(e.evaluate({**out, s: 1})) - b
            if a != 0 and (n - b) % a == 0 and (n - b) // a >= 0:
                out[s] = (n - b) // a
                progress = True
    for e, n in pairs:
        missing = e.dims() - set(out)
        if missing:
            raise InputError(f"cannot determine dims {sorted(missing)} from a size {n} = {e}")
        if int(e.evaluate(out)) != n:
            raise InputError(f"a size {n} does not fit the compiled shape {e} with dims {out}")
    return out
