"""GraphTensor: a lazy handle (graph, node id, view, dtype) with numpy/torch-style operators.

Movement ops only change the view; compute ops add HLIR nodes. The methods live in
luminal/frontend/ by family and are bound here, so this file is the public surface.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from luminal.errors import DTypeError
from luminal.frontend import binary, indexing, matmul, movement, reduction, unary
from luminal.shape.expr import Expression
from luminal.shape.tracker import ShapeTracker

if TYPE_CHECKING:
    from luminal.dtype import DType
    from luminal.graph import Graph


@dataclass(frozen=True, eq=False)
class GraphTensor:
    graph: Graph
    id: int
    view: ShapeTracker
    dtype: DType

    # Hashing is identity, so tensors can be dict keys and set members (dict and set lookups compare
    # identity before calling __eq__, so they never reach the raising operators below).
    __hash__ = object.__hash__
    # numpy must not treat a tensor as a sequence (`np.float32(2) * x` would iterate it): with this,
    # numpy's operators return NotImplemented and Python calls the tensor's reflected operator (torch does the same).
    __array_ufunc__ = None

    @property
    def shape(self) -> tuple[Expression, ...]:
        return self.view.dims

    @property
    def ndim(self) -> int:
        return self.view.ndim

    def output(self, name: str | None = None) -> GraphTensor:
        """Mark this tensor as an output of the graph (materialized contiguous) and return it."""
        return self.graph.mark_output(self, name)

    def persist(self) -> GraphTensor:
        """Keep this input bound across runs (weights, caches): pass it once, reuse it after."""
        from luminal.hlir import Input

        op = self.graph.nodes[self.id].op
        if not isinstance(op, Input):
            from luminal.errors import InputError

            raise InputError("persist() applies to graph inputs (g.tensor(...)); call it on the input tensor")
        self.graph.persistent.add(op.label)
        return self

    def with_view(self, view: ShapeTracker) -> GraphTensor:
        return GraphTensor(self.graph, self.id, view, self.dtype)

    def __repr__(self) -> str:
        return f"GraphTensor(node={self.id}, shape={list(self.shape)}, dtype={self.dtype.value})"

    def __len__(self) -> int:
        return int(self.shape[0]) if self.ndim else 0

    def __bool__(self) -> bool:
        raise DTypeError(
            "the truth value of a GraphTensor is not known while the graph is built (it is lazy): "
            "use lm.where(cond, a, b) to select, or compare with `is None` to test for a tensor"
        )

    # `==` / `!=` with a tensor or a number would have to be elementwise (numpy) or identity (Python);
    # either silently does the wrong thing for half of the users, so both raise and point to the
    # elementwise methods (docs/numerics.md, "Python operators"). Against anything else (None,
    # Ellipsis, a string) Python's identity answer is the only meaning: NotImplemented gives it.
    def __eq__(self, other: object) -> bool:
        if not _comparable(other):
            return NotImplemented
        raise DTypeError("`==` on a GraphTensor is ambiguous: use a.eq(b) elementwise, `a is b` for identity")

    def __ne__(self, other: object) -> bool:
        if not _comparable(other):
            return NotImplemented
        raise DTypeError("`!=` on a GraphTensor is ambiguous: use a.ne(b) elementwise, `a is not b` for identity")

    # arithmetic and comparison operators (frontend/binary.py)
    __add__, __radd__ = binary.add, binary.radd
    __sub__, __rsub__ = binary.sub, binary.rsub
    __mul__, __rmul__ = binary.mul, binary.rmul
    __truediv__, __rtruediv__ = binary.truediv, binary.rtruediv
    __floordiv__, __rfloordiv__ = binary.floordiv, binary.rfloordiv
    __mod__, __rmod__ = binary.mod, binary.rmod
    __pow__ = binary.pow
    pow = binary.pow
    __neg__ = binary.neg
    __lt__, __gt__, __le__, __ge__ = binary.lt, binary.gt, binary.le, binary.ge
    eq, ne = binary.eq, binary.ne
    __and__, __or__, __invert__ = binary.logical_and, binary.logical_or, binary.logical_not
    __rand__, __ror__ = binary.logical_and, binary.logical_or
    __xor__ = __rxor__ = binary.logical_xor
    maximum, minimum, clip = binary.maximum, binary.minimum, binary.clip
    __matmul__ = matmul.matmul
    matmul = matmul.matmul

    # unary math (frontend/unary.py)
    exp, exp2, log, log2, sin, cos = unary.exp, unary.exp2, unary.log, unary.log2, unary.sin, unary.cos
    sqrt, rsqrt, reciprocal, square = unary.sqrt, unary.rsqrt, unary.reciprocal, unary.square
    abs, sign, relu, sigmoid, silu = unary.abs, unary.sign, unary.relu, unary.sigmoid, unary.silu
    tanh, gelu, gelu_tanh, softplus = unary.tanh, unary.gelu, unary.gelu_tanh, unary.softplus
    __abs__ = unary.abs
    cast = astype = unary.cast

    # reductions and normalizations (frontend/reduction.py)
    sum, max, min, mean = reduction.sum, reduction.max, reduction.min, reduction.mean
    var, std, prod = reduction.var, reduction.std, reduction.prod
    argmax, argmin = reduction.argmax, reduction.argmin
    softmax, log_softmax, cumsum = reduction.softmax, reduction.log_softmax, reduction.cumsum
    layer_norm, rms_norm, topk = reduction.layer_norm, reduction.rms_norm, reduction.topk

    # movement (frontend/movement.py)
    reshape, permute, transpose = movement.reshape, movement.permute, movement.transpose
    unsqueeze, squeeze, flatten = movement.unsqueeze, movement.squeeze, movement.flatten
    expand, repeat, contiguous = movement.expand, movement.repeat, movement.contiguous
    __getitem__, pad = movement.getitem, movement.pad

    # indexing (frontend/indexing.py)
    gather, take_along_axis, scatter = indexing.gather, indexing.take_along_axis, indexing.scatter
    where = indexing.where_method
    tril, triu = indexing.tril, indexing.triu

    @property
    def T(self) -> GraphTensor:
        return movement.permute(self, *reversed(range(self.ndim)))


def _comparable(x: object) -> bool:
    """Whether `tensor == x` could mean an elementwise comparison: a tensor, a number, an array."""
    return isinstance(x, (GraphTensor, numbers.Number, np.generic, np.ndarray))
