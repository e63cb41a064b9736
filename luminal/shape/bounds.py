"""Interval bounds of symbolic expressions and the min/max folds that use them (construction-time
folding; luminal/shape/expr.py builds on these and re-exports `bounds`).

Why: a dim that is sliced again and again (`y = y[1:]` in a loop) would otherwise nest a copy of
the previous dim on both sides of each clamp, doubling the printed expression per slice. The
normal form keeps such chains linear:

* min/max are n-ary in effect: nested same-op chains are flattened (a constant added to a nested
  one moves inside: `max(max(a, 0) - 1, 0) = max(a - 1, -1, 0)`), sorted and rebuilt right-nested;
* arguments that differ only by a constant keep the dominating one: `max(a - 1, a - 2) = a - 1`;
* an argument whose interval is dominated by another's goes: `max(x, 0) = x` when x >= 0;
* a sum moves into one of its min/max terms when that cancels a term: `a - min(1, a) = max(a - 1, 0)`.
  Otherwise a constant stays outside (`max(a, 0) - 1`), so that `min(max(a, 0) - 1, max(a, 0))`
  still sees two arguments that differ by a constant.

Every rule holds for all integers (variables are dims and `z`, so non-negative; divisors are
assumed non-zero, as the folds of expr.py assume). `INF` is "no bound": max with it is INF, min
drops it.
"""

from __future__ import annotations

import math

from luminal.shape.expr import INF, Expression, _from_linear, _linear, add, mul, num

Interval = tuple[float, float]  # ints, or -inf / inf
_BOUNDS: dict[Expression, Interval] = {}
_UNBOUNDED: Interval = (-math.inf, math.inf)


def bounds(e: Expression) -> Interval:
    """(lo, hi) with lo <= e <= hi for every non-negative value of the variables."""
    r = _BOUNDS.get(e)
    if r is None:
        r = _BOUNDS[e] = _compute(e)
    return r


def _mul(x: float, y: float) -> float:
    return 0 if x == 0 or y == 0 else x * y  # 0 * inf = 0 here: a zero factor is exactly zero


def _tdiv(x: float, y: float) -> float:
    """Truncating x / y for y > 0, with infinities."""
    if math.isinf(x):
        return x
    if math.isinf(y):
        return 0
    q = abs(int(x)) // int(y)
    return q if x >= 0 else -q


def _compute(e: Expression) -> Interval:
    op, args = e.op, e.args
    if op == "num":
        return (args[0], args[0])
    if op == "var":
        return (0, math.inf)
    bs = [bounds(a) for a in args]
    if op == "add":
        return (sum(b[0] for b in bs), sum(b[1] for b in bs))
    if op == "mul":
        lo, hi = bs[0]
        for blo, bhi in bs[1:]:
            corners = (_mul(lo, blo), _mul(lo, bhi), _mul(hi, blo), _mul(hi, bhi))
            lo, hi = min(corners), max(corners)
        return (lo, hi)
    if op in ("lt", "ge", "and", "or"):
        return (0, 1)
    (alo, ahi), (blo, bhi) = bs
    if op == "min":
        return (min(alo, blo), min(ahi, bhi))
    if op == "max":
        return (max(alo, blo), max(ahi, bhi))
    if op == "div" and blo > 0:  # truncation is monotone in a; |a / b| shrinks as b grows
        return (min(_tdiv(alo, blo), _tdiv(alo, bhi)), max(_tdiv(ahi, blo), _tdiv(ahi, bhi)))
    if op in ("div", "cdiv") and alo >= 0 and blo >= 0:  # b >= 1 (non-zero): 0 <= a // b <= a
        return (0, ahi)
    if op == "mod" and blo >= 0:  # |a % b| < b, sign of a
        m = bhi - 1
        return (0 if alo >= 0 else max(alo, -m), min(ahi, m) if ahi >= 0 else 0)
    return _UNBOUNDED


# -- min / max ---------------------------------------------------------------------------------------
def _flat(op: str, e: Expression) -> list[Expression]:
    """The arguments of a nested `op` chain; `op(..) + c` counts as one, c added to each argument."""
    if e.op == op:
        return [x for a in e.args for x in _flat(op, a)]
    if e.op == "add":
        terms, c = _linear(e)
        if len(terms) == 1:
            ((t, k),) = terms.items()
            if k == 1 and t.op == op:
                return [add(x, c) for x in _flat(op, t)]
    return [e]


def fold_minmax(op: str, a: Expression, b: Expression) -> Expression:
    """min(a, b) or max(a, b) in normal form (module docstring)."""
    is_max = op == "max"
    args = _flat(op, a) + _flat(op, b)
    if any(x == INF for x in args):
        if is_max:
            return num(INF)
        args = [x for x in args if x != INF] or [num(INF)]
    # arguments that differ by a constant: keep the larger (max) / smaller (min)
    best: dict[tuple, tuple[int, Expression]] = {}
    for x in args:
        terms, c = _linear(x)
        k = tuple(sorted(((t.key, v) for t, v in terms.items() if v), key=lambda tv: tv[0]))
        old = best.get(k)
        if old is None or (c > old[0] if is_max else c < old[0]):
            best[k] = (c, x)
    args = [x for _, x in best.values()]
    # arguments dominated by another's interval
    kept = list(args)
    for x in args:
        lo, hi = bounds(x)
        if any(y is not x and (bounds(y)[0] >= hi if is_max else bounds(y)[1] <= lo) for y in kept):
            kept.remove(x)
    args = sorted(kept, key=lambda x: x.key)
    out = args[-1]
    for x in reversed(args[:-1]):
        out = Expression(op, (x, out))
    return out


def lift_minmax(terms: dict[Expression, int], c: int) -> Expression | None:
    """The sum `terms + c` with one min/max term moved outside, when that cancels one of the other
    terms (module docstring); None when no term qualifies."""
    for t, k in sorted(terms.items(), key=lambda tk: tk[0].key):
        if t.op not in ("min", "max") or not k:
            continue
        rest = {x: v for x, v in terms.items() if x is not t and v}
        branches = _flat(t.op, t)
        if not rest or not any(_cancels(rest, mul(x, k)) for x in branches):
            continue
        r = _from_linear(dict(rest), c)
        parts = [add(mul(x, k), r) for x in branches]
        op = t.op if k > 0 else ("min" if t.op == "max" else "max")
        out = parts[0]
        for p in parts[1:]:
            out = fold_minmax(op, out, p)
        return out
    return None


def _cancels(rest: dict[Expression, int], x: Expression) -> bool:
    terms, _ = _linear(x)
    return any(rest.get(t, 0) + v == 0 or t in rest for t, v in terms.items())
