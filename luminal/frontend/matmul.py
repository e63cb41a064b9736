"""Matmul as a broadcast Mul followed by a SumReduce over k (backends pattern-match it).

bool @ bool is numpy's: the logical or over k of the ands, a bool (computed as the count of true
products over k, > 0: a max would have no value for k = 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from luminal.dtype import DType
from luminal.errors import DTypeError, ShapeError
from luminal.frontend.movement import broadcast_shapes, expand, unsqueeze

if TYPE_CHECKING:
    from luminal.tensor import GraphTensor


def matmul(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """numpy matmul semantics: 1-D operands gain (and then lose) an axis; batch dims broadcast."""
    from luminal.tensor import GraphTensor

    if not isinstance(b, GraphTensor):
        raise DTypeError(f"matmul: the right operand must be a tensor, got {type(b).__name__}; use * for scalars")
    if b.graph is not a.graph:
        raise DTypeError("matmul: the two tensors belong to different graphs")
    if a.dtype != b.dtype:
        raise DTypeError(f"matmul: dtypes differ ({a.dtype} @ {b.dtype}); cast one side")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul of a 0-d tensor: use * for scalars")
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = unsqueeze(a, 0)
    if vb:
        b = unsqueeze(b, 1)
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k is not k2:
        raise ShapeError(f"matmul: inner dims differ: {list(a.shape)} @ {list(b.shape)} ({k} != {k2})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="matmul")
    a3 = expand(unsqueeze(a, -2), *batch, m, n, k)  # (..., m, n, k)
    b3 = expand(unsqueeze(b.transpose(-1, -2), -3), *batch, m, n, k)  # (..., m, n, k)
    prod = a3 * b3  # (..., m, n, k); on bool this is and
    out = (prod.cast(DType.i32).sum(-1) > 0) if prod.dtype == DType.bool else prod.sum(-1)  # (..., m, n)
    if va:
        out = out.squeeze(-2)
    if vb:
        out = out.squeeze(-1)
    return out
