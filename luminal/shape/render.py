"""Evaluation and printing of symbolic Expressions: vectorized numpy evaluation (C semantics),
the readable form, egglog terms, C source, and decoding egglog terms back (luminal/shape/expr.py
owns construction and folding, and re-exports `from_egglog`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from luminal.errors import InputError, ShapeError
from luminal.shape.expr import _BIN_EGGLOG, _FOLD, INF, Expression, Z, _cdiv, _tdiv, add, mul, num, var, z


# -- evaluation -----------------------------------------------------------------------------------
def _np_tdiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ShapeError("division by zero while evaluating a shape expression")
        return _tdiv(a, b)
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    with np.errstate(divide="ignore"):  # a zero divisor: undefined (luminal/shape/expr.py), no error
        q = np.abs(a) // np.abs(b)
    return np.where((a < 0) ^ (b < 0), -q, q)


def _np_tmod(a, b):
    return a - b * _np_tdiv(a, b)


def _np_cdiv(a, b):
    """Ceiling division: the truncated quotient, plus one when the exact quotient is positive and
    not whole."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ShapeError("division by zero while evaluating a shape expression")
        return _cdiv(a, b)
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    return _np_tdiv(a, b) + ((_np_tmod(a, b) != 0) & ((a < 0) == (b < 0)))


def _bool(x):
    return int(x) if isinstance(x, (bool, np.bool_)) else x.astype(np.int64)


_EVAL = {
    "div": _np_tdiv,
    "mod": _np_tmod,
    "cdiv": _np_cdiv,
    "min": lambda a, b: min(a, b) if isinstance(a, int) and isinstance(b, int) else np.minimum(a, b),
    "max": lambda a, b: max(a, b) if isinstance(a, int) and isinstance(b, int) else np.maximum(a, b),
    "lt": lambda a, b: _bool(a < b),
    "ge": lambda a, b: _bool(a >= b),
    "and": lambda a, b: _bool((a != 0) & (b != 0)),
    "or": lambda a, b: _bool((a != 0) | (b != 0)),
}


def _eval(e: Expression, env: Mapping[str, object], memo: dict):
    r = memo.get(e)
    if r is not None:
        return r
    if e.op == "num":
        r = e.args[0]
    elif e.op == "var":
        name = e.args[0]
        if name not in env:
            known = ", ".join(sorted(k for k in env if k != Z)) or "none"
            raise InputError(f"no value for dim '{name}' (known dims: {known}); pass it in dims={{'{name}': ...}}")
        r = env[name]
    elif e.op == "add":
        r = _eval(e.args[0], env, memo)
        for a in e.args[1:]:
            r = r + _eval(a, env, memo)
    elif e.op == "mul":
        r = _eval(e.args[0], env, memo)
        for a in e.args[1:]:
            r = r * _eval(a, env, memo)
    else:
        r = _EVAL[e.op](_eval(e.args[0], env, memo), _eval(e.args[1], env, memo))
    memo[e] = r
    return r


# -- printing -------------------------------------------------------------------------------------
_INFIX = {"div": "//", "mod": "%", "lt": "<", "ge": ">=", "and": "&", "or": "|"}


def _show(e: Expression) -> str:
    if e.op == "num":
        return str(e.args[0]) if e.args[0] != INF else "inf"
    if e.op == "var":
        return e.args[0]
    if e.op == "add":
        return "(" + " + ".join(_show(a) for a in e.args) + ")"
    if e.op == "mul":
        return "*".join(_show(a) for a in e.args)
    if e.op in _INFIX:
        return f"({_show(e.args[0])} {_INFIX[e.op]} {_show(e.args[1])})"
    return f"{e.op}({_show(e.args[0])}, {_show(e.args[1])})"


def _egg(e: Expression, memo: dict) -> str:
    r = memo.get(e)
    if r is not None:
        return r
    if e.op == "num":
        r = f"(MNum {e.args[0]})"
    elif e.op == "var":
        r = "(MIter)" if e.args[0] == Z else f'(MVar "{e.args[0]}")'
    elif e.op in ("add", "mul"):
        head = "MAdd" if e.op == "add" else "MMul"
        parts = [_egg(a, memo) for a in e.args]
        r = parts[0]
        for p in parts[1:]:
            r = f"({head} {r} {p})"
    else:
        r = f"({_BIN_EGGLOG[e.op]} {_egg(e.args[0], memo)} {_egg(e.args[1], memo)})"
    memo[e] = r
    return r


_C_BIN = {"div": "/", "mod": "%", "lt": "<", "ge": ">=", "and": "&&", "or": "||"}


def _c(e: Expression, name: Callable[[str], str], memo: dict) -> str:
    r = memo.get(e)
    if r is not None:
        return r
    if e.op == "num":
        n = e.args[0]
        r = f"{n}LL" if abs(n) > 2**31 - 1 else (f"({n})" if n < 0 else str(n))
    elif e.op == "var":
        r = name(e.args[0])
    elif e.op in ("add", "mul"):
        r = "(" + (" + " if e.op == "add" else " * ").join(_c(a, name, memo) for a in e.args) + ")"
    elif e.op in _C_BIN:
        r = f"({_c(e.args[0], name, memo)} {_C_BIN[e.op]} {_c(e.args[1], name, memo)})"
    elif e.op == "cdiv":
        a, b = _c(e.args[0], name, memo), _c(e.args[1], name, memo)
        r = f"({a} / {b} + ({a} % {b} != 0 && ({a} < 0) == ({b} < 0)))"  # exact ceiling, any signs
    else:  # min / max
        r = f"{e.op}((long long){_c(e.args[0], name, memo)}, (long long){_c(e.args[1], name, memo)})"
    memo[e] = r
    return r


_FROM_EGGLOG = {v: k for k, v in _BIN_EGGLOG.items()} | {"MAdd": "add", "MMul": "mul"}


def from_egglog(head: str, args: list) -> Expression:
    """Rebuild an Expression from a decoded egglog term: head + already-decoded arguments."""
    if head == "MNum":
        return num(int(args[0]))
    if head == "MVar":
        return var(str(args[0]))
    if head == "MIter":
        return z
    if head == "MSub":
        return add(args[0], mul(args[1], -1))
    if head == "MAdd":
        return add(args[0], args[1])
    if head == "MMul":
        return mul(args[0], args[1])
    if head in _FROM_EGGLOG:
        return _FOLD[_FROM_EGGLOG[head]](args[0], args[1])
    raise ShapeError(f"unknown egglog expression constructor {head!r}")
