"""Fused expressions: the body of a fused op, a small DAG of ops over the fused op's inputs.

A fused op (e.g. the CUDA backend's KernelFused) computes its root op applied to argument
expressions; each argument is an `FLeaf` (read input `index` of the fused op, a buffer) or an
`FNode` (another op computed inline, its own arguments again leaves or nodes). Every node has
exactly the semantics of its op as a standalone LLIR node -- it reads its arguments through its
own views as if they were contiguous buffers and rounds its result to its dtype -- so a fused op
computes bit for bit what the unfused chain computes (the reference evaluates it that way).

In egglog the same structure is the `FExpr` / `FList` sorts (registry.py): `(FIn ir)` is a leaf
(the extractor numbers leaves by first use), `(FOp kind args)` a node, `(FWrap f)` an alias of
`f`. Nodes are interned, so equal bodies are the same object and hashing stays linear in the DAG.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, NewType

import numpy as np

if TYPE_CHECKING:
    from luminal.dtype import DType
    from luminal.hlir.op import Op

_INTERN: dict[tuple, FExpr] = {}


class FLeaf:
    """Argument `index` of the fused op (an input buffer)."""

    __slots__ = ("index", "_hash")

    def __new__(cls, index: int) -> FLeaf:
        key = ("leaf", int(index))
        got = _INTERN.get(key)
        if got is None:
            got = object.__new__(cls)
            got.index = int(index)
            got._hash = hash(key)
            _INTERN[key] = got
        return got  # type: ignore[return-value]

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return (FLeaf, (self.index,))

    def __repr__(self) -> str:
        return f"in{self.index}"


class FNode:
    """`op` applied to `args` (FLeaf / FNode), computed inside the fused kernel."""

    __slots__ = ("op", "args", "_hash")

    def __new__(cls, op: Op, args: tuple[FExpr, ...]) -> FNode:
        args = tuple(args)
        key = ("node", op, tuple(id(a) for a in args))  # args are interned (and kept alive by the node)
        got = _INTERN.get(key)
        if got is None:
            got = object.__new__(cls)
            got.op, got.args = op, args
            got._hash = hash((op, tuple(a._hash for a in args)))
            _INTERN[key] = got
        return got  # type: ignore[return-value]

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return (FNode, (self.op, self.args))

    def __repr__(self) -> str:
        return f"{type(self.op).__name__}({', '.join(map(repr, self.args))})"


FExpr = FLeaf | FNode
FArgs = NewType("FArgs", tuple)  # field type of a fused op's arguments (egglog sort FList): tuple of FExpr


def topo(roots: tuple[FExpr, ...]) -> list[FExpr]:
    """Every distinct node reachable from `roots`, arguments before users."""
    out: list[FExpr] = []
    seen: set[int] = set()
    stack: list[tuple[FExpr, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        e, done = stack.pop()
        if id(e) in seen:
            continue
        if done or isinstance(e, FLeaf):
            seen.add(id(e))
            out.append(e)
            continue
        stack.append((e, True))
        stack.extend((a, False) for a in reversed(e.args) if id(a) not in seen)
    return out


def ops(roots: tuple[FExpr, ...]) -> Iterator[FNode]:
    return (e for e in topo(roots) if isinstance(e, FNode))


def substitute(roots: tuple[FExpr, ...], fn: Callable[[FExpr], FExpr | None]) -> tuple[FExpr, ...]:
    """`roots` with every node e for which fn(e) is not None replaced by fn(e) (arguments first)."""
    memo: dict[int, FExpr] = {}
    for e in topo(roots):
        r = fn(e)
        if r is None:
            r = e if isinstance(e, FLeaf) else FNode(e.op, tuple(memo[id(a)] for a in e.args))
        memo[id(e)] = r
    return tuple(memo[id(r)] for r in roots)


def n_leaves(roots: tuple[FExpr, ...]) -> int:
    return 1 + max((e.index for e in topo(roots) if isinstance(e, FLeaf)), default=-1)


def evaluate(
    root_op: Op,
    args: tuple[FExpr, ...],
    ins: list,
    in_dtypes: tuple,
    env: Mapping[str, int],
    hold: Callable[[DType], DType] = lambda dt: dt,
    exact: Callable[[Op], bool] = lambda op: True,
):
    """Reference semantics: every node runs its op's `reference` on its arguments' flat buffers.
    `hold(dt)` is the dtype a value of dtype `dt` is kept in between nodes (a backend that keeps
    16-bit floats in f32 registers passes that); an op with `exact(op)` reads its arguments
    rounded to their own dtypes; the root's result is rounded to its own dtype."""
    logical = dtypes(args, tuple(in_dtypes))
    vals: dict[int, np.ndarray] = {}

    def get(e: FExpr) -> np.ndarray:
        return np.asarray(ins[e.index]) if isinstance(e, FLeaf) else vals[id(e)]

    def run(op: Op, xs: tuple[FExpr, ...]) -> np.ndarray:
        dts = tuple(logical[id(a)] if exact(op) else hold(logical[id(a)]) for a in xs)
        return op.reference([get(a).astype(d.np, copy=False) for a, d in zip(xs, dts, strict=True)], dts, env)

    for e in topo(args):
        if isinstance(e, FNode):
            vals[id(e)] = run(e.op, e.args).astype(hold(logical[id(e)]).np, copy=False)
    out_dt = root_op.out_dtype(tuple(logical[id(a)] for a in args))
    return run(root_op, args).astype(out_dt.np, copy=False)


def dtypes(args: tuple[FExpr, ...], in_dtypes: tuple) -> dict[int, object]:
    """id(node) -> its output dtype, given the fused op's input dtypes."""
    out: dict[int, object] = {}
    for e in topo(args):
        if isinstance(e, FLeaf):
            out[id(e)] = in_dtypes[e.index]
        else:
            out[id(e)] = e.op.out_dtype(tuple(out[id(a)] for a in e.args))
    return out


# -- JSON: a node table, arguments before users (the LLIR cache and the canonical text) ------------------
def encode(args: tuple[FExpr, ...], enc_op: Callable[[Op], object]) -> dict:
    order = topo(args)
    pos = {id(e): k for k, e in enumerate(order)}
    rows = [["in", e.index] if isinstance(e, FLeaf) else [enc_op(e.op), [pos[id(a)] for a in e.args]] for e in order]
    return {"fexpr": rows, "args": [pos[id(a)] for a in args]}


def decode(data: Mapping, dec_op: Callable[[object], Op]) -> tuple[FExpr, ...]:
    built: list[FExpr] = []
    for row in data["fexpr"]:
        if row[0] == "in":
            built.append(FLeaf(int(row[1])))
        else:
            built.append(FNode(dec_op(row[0]), tuple(built[int(k)] for k in row[1])))
    return tuple(built[int(k)] for k in data["args"])
