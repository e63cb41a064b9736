"""Input checks of the nn blocks: each block states the rank and layout it expects, and a tensor
that does not fit raises ShapeError naming the block (by its weights' checkpoint prefix), so a
batched or transposed input fails where it enters instead of broadcasting into a wrong result."""

from __future__ import annotations

from collections.abc import Mapping

from luminal.errors import ShapeError
from luminal.shape.expr import ExprLike, expr
from luminal.tensor import GraphTensor


def block_name(kind: str, w: GraphTensor) -> str:
    """`Kind 'prefix'` for a block whose weight `w` is the graph input `prefix.weight`."""
    label = getattr(w.graph.nodes[w.id].op, "label", "")
    return f"{kind} {label.rsplit('.', 1)[0]!r}" if label else kind


def expect(x: object, block: str, layout: str, rank: int | None = None, dims: Mapping[int, ExprLike] | None = None):
    """ShapeError unless `x` is a tensor with `rank` axes (any rank when None) whose axis k is dims[k]."""
    if not isinstance(x, GraphTensor):
        raise ShapeError(f"{block}: expects a GraphTensor {layout}, got {type(x).__name__}")
    ok = rank is None or x.ndim == rank
    for k, d in (dims or {}).items():
        ok = ok and -x.ndim <= k < x.ndim and x.shape[k] is expr(d)
    if not ok:
        raise ShapeError(f"{block}: expects {layout}; got a tensor of shape {list(x.shape)}")
