"""Symbolic integer expressions over dim symbols and the index variable `z` (shapes and strides).

Expressions are immutable and hash-consed: building the same expression twice returns the same
object, so equality and hashing are identity-fast. Construction folds eagerly into a normal form
(sums of terms with integer coefficients, products with one numeric factor, min/max chains
flattened and pruned by interval bounds: luminal/shape/bounds.py) so the expression work of
building a large graph stays small. Folds assume what holds for every shape and index
expression: variables (dims and `z`) are non-negative integers. Rules that need a non-negative
operand (div/mod of a sum) check it syntactically (`nonneg`).

Integer semantics are C's: `//` and `%` truncate toward zero.

A zero divisor. Index expressions divide by dims and products of dims (row-major strides, merged
axes); such a divisor is 0 only when the view it indexes is empty, and then no index is ever
evaluated. So the value of `a // 0`, `a % 0` and `ceil_div(a, 0)` is left undefined (folds may
assume a divisor is not zero), and a literal zero divisor folds to 0 instead of raising: size-0
dims work in every op. Ops that divide by a user's number (slice steps, reshape's -1, strides of
a convolution) check it for zero themselves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Union

import numpy as np

from luminal.errors import ShapeError

Z = "z"  # the reserved index variable inside stride / index expressions
INF = 1 << 62  # "no bound" (slice ends, min/max identities)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")

ExprLike = Union["Expression", int, str]

# ops: num var add mul div mod min max cdiv lt ge and or
_BIN_EGGLOG = {
    "div": "MDiv", "mod": "MMod", "min": "MMin", "max": "MMax", "cdiv": "MCeilDiv",
    "lt": "MLt", "ge": "MGte", "and": "MAnd", "or": "MOr",
}  # fmt: skip
_INTERN: dict[tuple, Expression] = {}


class Expression:
    """A symbolic integer expression. Build with `num`, `var`, `expr` and the Python operators."""

    __slots__ = ("op", "args", "_hash", "_key", "_vars", "__weakref__")
    op: str
    args: tuple

    def __new__(cls, op: str, args: tuple) -> Expression:
        k = (op, args)
        e = _INTERN.get(k)
        if e is None:
            e = object.__new__(cls)
            e.op, e.args = op, args
            e._hash = hash(k)
            e._key = None
            e._vars = None
            _INTERN[k] = e
        return e

    def __reduce__(self):
        return (Expression, (self.op, self.args))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Expression):
            return self is other
        if isinstance(other, (int, np.integer)) and not isinstance(other, bool):
            return self.op == "num" and self.args[0] == int(other)
        if isinstance(other, str):
            return self.op == "var" and self.args[0] == other
        return NotImplemented

    # -- inspection -------------------------------------------------------------------------------
    @property
    def is_num(self) -> bool:
        return self.op == "num"

    @property
    def value(self) -> int:
        """The integer of a numeric expression (raises ShapeError if symbolic)."""
        if self.op != "num":
            raise ShapeError(f"expression {self} is symbolic; a concrete integer was needed here")
        return self.args[0]

    def vars(self) -> frozenset[str]:
        """Every variable name in the expression, `z` included."""
        if self._vars is None:
            if self.op == "var":
                self._vars = frozenset(self.args)
            elif self.op == "num":
                self._vars = frozenset()
            else:
                self._vars = frozenset().union(*(a.vars() for a in self.args))
        return self._vars

    def dims(self) -> frozenset[str]:
        """The dim symbols of the expression (every variable but `z`)."""
        return self.vars() - {Z}

    @property
    def key(self) -> str:
        """A deterministic sort key (the printed form)."""
        if self._key is None:
            self._key = str(self)
        return self._key

    # -- operators (all fold) ---------------------------------------------------------------------
    def __add__(self, o: ExprLike) -> Expression:
        return add(self, o)

    __radd__ = __add__

    def __sub__(self, o: ExprLike) -> Expression:
        return add(self, mul(o, -1))

    def __rsub__(self, o: ExprLike) -> Expression:
        return add(o, mul(self, -1))

    def __mul__(self, o: ExprLike) -> Expression:
        return mul(self, o)

    __rmul__ = __mul__

    def __neg__(self) -> Expression:
        return mul(self, -1)

    def __floordiv__(self, o: ExprLike) -> Expression:
        return div(self, o)

    def __rfloordiv__(self, o: ExprLike) -> Expression:
        return div(o, self)

    def __mod__(self, o: ExprLike) -> Expression:
        return mod(self, o)

    def __rmod__(self, o: ExprLike) -> Expression:
        return mod(o, self)

    def __and__(self, o: ExprLike) -> Expression:
        return _logic("and", self, o)

    def __or__(self, o: ExprLike) -> Expression:
        return _logic("or", self, o)

    def lt(self, o: ExprLike) -> Expression:
        return lt(self, o)

    def ge(self, o: ExprLike) -> Expression:
        return ge(self, o)

    def le(self, o: ExprLike) -> Expression:
        return ge(o, self)

    def gt(self, o: ExprLike) -> Expression:
        return lt(o, self)

    def __bool__(self) -> bool:
        raise TypeError(f"the truth value of symbolic expression {self} is unknown; compare with .is_num/.value")

    def __int__(self) -> int:
        return self.value

    __index__ = __int__

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate(self, env: Mapping[str, object]):
        """Value under `env` (dim name -> int; `z` may be a numpy int array for index grids)."""
        return _eval(self, env, {})

    def substitute(self, name: str, value: ExprLike) -> Expression:
        """Replace variable `name` (a dim or `z`) by `value` everywhere, refolding."""
        return substitute(self, {name: expr(value)})

    # -- printing ---------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return _show(self)

    def to_egglog(self) -> str:
        """Egglog term of the base `Expression` datatype: (MAdd (MVar "s") (MNum 1)), `z` -> (MIter)."""
        memo: dict[Expression, str] = {}
        return _egg(self, memo)

    def to_c(self, name: Callable[[str], str]) -> str:
        """C source (64-bit integer arithmetic), each variable spelled by `name(var)`."""
        return _c(self, name, {})


# -- construction ---------------------------------------------------------------------------------
def num(n: int) -> Expression:
    return Expression("num", (int(n),))


def var(name: str) -> Expression:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ShapeError(f"bad dim symbol {name!r}: use a name like 's' or 'seq_len' ([A-Za-z][A-Za-z0-9_]*)")
    return Expression("var", (name,))


def dim(name: str) -> Expression:
    """A dim symbol (rejects the reserved index variable `z`)."""
    if name == Z:
        raise ShapeError("'z' is reserved for the index variable of strides; pick another dim name")
    return var(name)


def expr(x: ExprLike) -> Expression:
    """Coerce an int, a symbol name or an Expression."""
    if isinstance(x, Expression):
        return x
    if isinstance(x, (bool, np.bool_)):
        raise ShapeError(f"a bool ({x!r}) is not a dimension or index expression")
    if isinstance(x, (int, np.integer)):
        return num(int(x))
    if isinstance(x, str):
        return var(x)
    raise ShapeError(f"cannot use {x!r} ({type(x).__name__}) as a dimension: give an int, a dim name or an Expression")


ZERO, ONE = num(0), num(1)
z = Expression("var", (Z,))


def nonneg(e: Expression) -> bool:
    """Syntactic proof that `e` and every sub-term of it are >= 0 for every non-negative assignment
    of its variables. The div/mod folds need each term of a sum non-negative, which the interval
    `bounds(e)[0] >= 0` of the whole sum does not give (2x - min(s, 1) >= 1, yet (2x - 1) // 2 != x)."""
    if e.op == "num":
        return e.args[0] >= 0
    if e.op == "var":
        return True
    return all(nonneg(a) for a in e.args)


# Linear normal form of sums: {term: coeff} + const. A term is any expression that is neither a
# number nor a sum nor a (number * x) product.
def _linear(e: Expression) -> tuple[dict[Expression, int], int]:
    if e.op == "num":
        return {}, e.args[0]
    if e.op == "add":
        terms: dict[Expression, int] = {}
        c = 0
        for a in e.args:
            t, k = _linear(a)
            c += k
            for x, v in t.items():
                terms[x] = terms.get(x, 0) + v
        return terms, c
    c, rest = _split_coeff(e)
    return {rest: c}, 0


def _split_coeff(e: Expression) -> tuple[int, Expression]:
    if e.op == "mul" and e.args[0].op == "num":
        rest = e.args[1:]
        return e.args[0].args[0], rest[0] if len(rest) == 1 else Expression("mul", rest)
    return 1, e


def _scaled(t: Expression, c: int) -> Expression:
    if c == 1:
        return t
    if t.op == "mul":
        return Expression("mul", (num(c), *t.args))
    return Expression("mul", (num(c), t))


def _from_linear(terms: dict[Expression, int], c: int) -> Expression:
    # merge-dims rule: k*n*(a//n) + k*(a%n) -> k*a  (C semantics: a == (a/n)*n + a%n)
    changed = True
    while changed:
        changed = False
        for t, k in list(terms.items()):
            if t.op == "mod" and k and t in terms:
                a, n = t.args
                d = _INTERN.get(("div", (a, n)))
                if d is None:
                    continue
                if n.op == "num":
                    dn, kd = d, k * n.args[0]
                else:  # symbolic n: the term is the product n*(a//n) with coefficient k
                    dn, kd = mul(d, n), k
                if terms.get(dn, 0) == kd:
                    del terms[t], terms[dn]
                    t2, c2 = _linear(a)
                    for x, v in t2.items():
                        terms[x] = terms.get(x, 0) + v * k
                    c += c2 * k
                    changed = True
                    break
    items = sorted(((t, k) for t, k in terms.items() if k), key=lambda tk: tk[0].key)
    parts = [_scaled(t, k) for t, k in items]
    if c or not parts:
        parts.append(num(c))
    return parts[0] if len(parts) == 1 else Expression("add", tuple(parts))


_MEMO: dict[tuple, Expression] = {}


def add(a: ExprLike, b: ExprLike) -> Expression:
    a, b = expr(a), expr(b)
    if a.op == "num" and b.op == "num":
        return num(a.args[0] + b.args[0])
    if b is ZERO:
        return a
    if a is ZERO:
        return b
    k = ("add", a, b)
    r = _MEMO.get(k)
    if r is None:
        ta, ca = _linear(a)
        tb, cb = _linear(b)
        for x, v in tb.items():
            ta[x] = ta.get(x, 0) + v
        r = lift_minmax(ta, ca + cb) if any(t.op in ("min", "max") and v for t, v in ta.items()) else None
        r = _MEMO[k] = r if r is not None else _from_linear(ta, ca + cb)
    return r


def mul(a: ExprLike, b: ExprLike) -> Expression:
    a, b = expr(a), expr(b)
    if a.op == "num" and b.op == "num":
        return num(a.args[0] * b.args[0])
    if b.op == "num":
        a, b = b, a
    if a.op == "num":
        n = a.args[0]
        if n == 0:
            return ZERO
        if n == 1:
            return b
        terms, c = _linear(b)  # distribute a number over a sum
        return _from_linear({t: k * n for t, k in terms.items()}, c * n)
    k = ("mul", a, b)
    r = _MEMO.get(k)
    if r is None:
        ca, ra = _split_coeff(a)
        cb, rb = _split_coeff(b)
        factors = sorted((*_factors(ra), *_factors(rb)), key=lambda f: f.key)
        prod = Expression("mul", tuple(factors))
        r = _MEMO[k] = mul(ca * cb, prod)
    return r


def _factors(e: Expression) -> tuple[Expression, ...]:
    return e.args if e.op == "mul" else (e,)


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _tmod(a: int, b: int) -> int:
    return a - b * _tdiv(a, b)


def _exact_quotient(a: Expression, b: Expression) -> Expression | None:
    """q with a == b * q syntactically (every term of a is a multiple of the monomial b), else None.
    Then a // b == q under any truncating semantics, whatever the signs."""
    if b.op == "num" or b.op == "add":
        return None
    cb, rb = _split_coeff(b)
    need = _factors(rb)
    terms, c = _linear(a)
    if c or not terms:
        return None
    out: dict[Expression, int] = {}
    for t, k in terms.items():
        if k % cb:
            return None
        fs = list(_factors(t))
        for f in need:
            if f not in fs:
                return None
            fs.remove(f)
        rest = ONE if not fs else fs[0] if len(fs) == 1 else Expression("mul", tuple(fs))
        out[rest] = out.get(rest, 0) + k // cb
    return _from_linear({t: k for t, k in out.items() if t is not ONE}, out.get(ONE, 0))


def _cdiv(a: int, b: int) -> int:
    """Ceiling of a / b (exact, any signs)."""
    return -((-a) // b)


def div(a: ExprLike, b: ExprLike) -> Expression:
    """Truncating integer division."""
    a, b = expr(a), expr(b)
    if b.op != "num" and a.op != "num":
        q = _exact_quotient(a, b)
        if q is not None:
            return q
    if b.op == "num":
        n = b.args[0]
        if n == 0:  # undefined: only in index expressions of an empty view (module docstring)
            return ZERO
        if a.op == "num":
            return num(_tdiv(a.args[0], n))
        if n == 1:
            return a
        if n > 0 and nonneg(a):
            terms, c = _linear(a)
            whole = {t: k // n for t, k in terms.items() if k % n == 0}
            rest = {t: k for t, k in terms.items() if k % n != 0}
            if whole or c >= n:  # (n*q + r) // n -> q + r // n    (q, r >= 0)
                return add(_from_linear(whole, c // n), _div_raw(_from_linear(rest, c % n), b))
            if a.op == "div" and a.args[1].op == "num" and a.args[1].args[0] > 0:  # (x//m)//n -> x//(m n)
                return div(a.args[0], a.args[1].args[0] * n)
            if a.op == "mod" and a.args[1].op == "num" and a.args[1].args[0] <= n:  # (x % m) // n -> 0, m <= n
                return ZERO
    if a is b:
        return ONE
    if a is ZERO:
        return ZERO
    return _div_raw(a, b)


def _div_raw(a: Expression, b: Expression) -> Expression:
    if a is ZERO:
        return ZERO
    if b is ONE:
        return a
    if a.op == "num" and b.op == "num":
        return num(_tdiv(a.args[0], b.args[0]))
    return Expression("div", (a, b))


def mod(a: ExprLike, b: ExprLike) -> Expression:
    """Truncating remainder (sign of the dividend), like C's `%`."""
    a, b = expr(a), expr(b)
    if b.op == "num":
        n = b.args[0]
        if n == 0:  # undefined: only in index expressions of an empty view (module docstring)
            return ZERO
        if a.op == "num":
            return num(_tmod(a.args[0], n))
        if abs(n) == 1:
            return ZERO
        if n > 0 and nonneg(a):
            terms, c = _linear(a)
            rest = {t: k for t, k in terms.items() if k % n != 0}
            if len(rest) < len(terms) or c >= n:  # (n*q + r) % n -> r % n    (q, r >= 0)
                r = _from_linear(rest, c % n)
                return mod(r, b) if r is not a else Expression("mod", (a, b))
            if a.op == "mod" and a.args[1].op == "num" and a.args[1].args[0] % n == 0:  # (x % kn) % n
                return mod(a.args[0], b)
            if a.op == "mod" and a.args[1].op == "num" and a.args[1].args[0] <= n:  # (x % m) % n, m <= n
                return a
    if a is b or a is ZERO:
        return ZERO
    return Expression("mod", (a, b))


def ceil_div(a: ExprLike, b: ExprLike) -> Expression:
    a, b = expr(a), expr(b)
    if b is ZERO:  # undefined: only in index expressions of an empty view (module docstring)
        return ZERO
    if a.op == "num" and b.op == "num":
        return num(_cdiv(a.args[0], b.args[0]))
    if b is ONE:
        return a
    if a is b:
        return ONE
    return Expression("cdiv", (a, b))


def minimum(a: ExprLike, b: ExprLike) -> Expression:
    return _minmax("min", a, b)


def maximum(a: ExprLike, b: ExprLike) -> Expression:
    return _minmax("max", a, b)


def _minmax(op: str, a: ExprLike, b: ExprLike) -> Expression:
    a, b = expr(a), expr(b)
    if a.op == "num" and b.op == "num":
        return num((max if op == "max" else min)(a.args[0], b.args[0]))
    if a is b:
        return a
    k = (op, a, b)
    r = _MEMO.get(k)
    if r is None:
        r = _MEMO[k] = fold_minmax(op, a, b)  # normal form: flattened, merged, pruned (bounds.py)
    return r


def lt(a: ExprLike, b: ExprLike) -> Expression:
    """1 if a < b else 0."""
    a, b = expr(a), expr(b)
    if a.op == "num" and b.op == "num":
        return num(int(a.args[0] < b.args[0]))
    if a is b:
        return ZERO
    return Expression("lt", (a, b))


def ge(a: ExprLike, b: ExprLike) -> Expression:
    """1 if a >= b else 0."""
    a, b = expr(a), expr(b)
    if a.op == "num" and b.op == "num":
        return num(int(a.args[0] >= b.args[0]))
    if a is b:
        return ONE
    if b is ZERO and nonneg(a):
        return ONE
    return Expression("ge", (a, b))


def _logic(op: str, a: ExprLike, b: ExprLike) -> Expression:
    a, b = expr(a), expr(b)
    if a.op == "num" and b.op == "num":
        x, y = a.args[0] != 0, b.args[0] != 0
        return num(int(x and y) if op == "and" else int(x or y))
    return Expression(op, (a, b))


def raw(op: str, *args: ExprLike) -> Expression:
    """An expression node built without folding (for tests and for decoding egglog terms)."""
    if op in ("num", "var"):
        return Expression(op, args)
    return Expression(op, tuple(expr(a) for a in args))


_FOLD: dict[str, Callable[..., Expression]] = {
    "div": div, "mod": mod, "min": minimum, "max": maximum, "cdiv": ceil_div, "lt": lt, "ge": ge,
    "and": lambda a, b: _logic("and", a, b), "or": lambda a, b: _logic("or", a, b),
}  # fmt: skip


def fold(e: Expression) -> Expression:
    """Refold an expression built with `raw` into normal form."""
    return substitute(e, {})


def substitute(e: Expression, env: Mapping[str, Expression]) -> Expression:
    """Replace variables by expressions (simultaneously) and refold."""
    memo: dict[Expression, Expression] = {}

    def go(x: Expression) -> Expression:
        r = memo.get(x)
        if r is not None:
            return r
        if x.op == "num":
            r = x
        elif x.op == "var":
            r = env.get(x.args[0], x)
        elif x.op == "add":
            r = ZERO
            for a in x.args:
                r = add(r, go(a))
        elif x.op == "mul":
            r = ONE
            for a in x.args:
                r = mul(r, go(a))
        else:
            r = _FOLD[x.op](go(x.args[0]), go(x.args[1]))
        memo[x] = r
        return r

    return go(e)


def prod(xs) -> Expression:
    r = ONE
    for x in xs:
        r = mul(r, x)
    return r


# Bounds and the min/max normal form live in bounds.py, evaluation and printing in render.py;
# imported last because both build on the above.
from luminal.shape.bounds import bounds, fold_minmax, lift_minmax  # noqa: E402, F401 (bounds: public here)
from luminal.shape.render import _c, _egg, _eval, _show, from_egglog  # noqa: E402, F401 (from_egglog: public here)
